"""Packing a batch's Kafka ranges into fewer Spark tasks (options ``maxPartitions`` and
``minRecordsPerPartition``).

Spark's Kafka source runs one task per Kafka partition with data. Every task of a Python data
source costs PySpark tens of milliseconds before the first record is read (worker hand-off,
the pickled reader and partition, Arrow set-up), so a topic with more partitions than the
cluster has cores pays that cost wave after wave in every micro-batch. With ``maxPartitions``
the driver packs the ranges into at most that many input partitions; a task then reads its
ranges one after another (each with its own barrier rows in place). With
``minRecordsPerPartition`` a small batch goes to fewer tasks still (:func:`task_count`): at
10,000-record batches one task reading four ranges beat four tasks by 1.5x.

Nothing downstream depends on which task read a range: barriers, epochs and alignment are per
channel (topic-partition), and every range keeps its records in offset order. A retried or
speculative task re-reads exactly the same ranges, because the packing is a pure function of
the batch's ranges.

Runs on the driver planner worker (``pack_ranges``) and on executors (a
:class:`KafkaRangeGroup` is pickled there inside its task).
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

from pyspark.sql.datasource import InputPartition


class KafkaRangeGroup(InputPartition):
    """Several Kafka ranges read by one task, in the order given. Picklable."""

    def __init__(self, ranges: Tuple) -> None:
        self.ranges = tuple(ranges)

    def __repr__(self) -> str:
        return f"KafkaRangeGroup({', '.join(map(repr, self.ranges))})"


def _weight(r) -> int:
    """Work of one range: its records, plus one for each barrier row it emits (a range of only
    barriers still costs a little)."""
    return max(0, r.until_offset - r.from_offset) + len(r.barriers)


def task_count(ranges: Sequence, max_partitions: Optional[int],
               min_records: Optional[int]) -> int:
    """Tasks to read ``ranges`` in (driver planner worker): one a range, at most
    ``max_partitions``, and with ``min_records`` about the ranges' records / ``min_records``
    (at least 1). A pure function of the ranges, as the packing itself."""
    n = len(ranges)
    if max_partitions is not None:
        n = min(n, max_partitions)
    if min_records is not None:
        records = sum(max(0, r.until_offset - r.from_offset) for r in ranges)
        n = min(n, max(1, math.ceil(records / min_records)))
    return n


def pack_ranges(ranges: Sequence, max_partitions: int) -> List[InputPartition]:
    """At most ``max_partitions`` input partitions holding every range of ``ranges`` exactly
    once (driver planner worker).

    Fewer ranges than that: returned unchanged, one task each (Spark's Kafka source layout).
    Otherwise largest range first into the lightest group (ties: the lower group), so groups
    carry about equal records; a group of one range is that range itself. Within a group the
    ranges keep their order in ``ranges`` (sorted by channel). Deterministic: the same ranges
    give the same groups.
    """
    if max_partitions < 1:
        raise ValueError(f"max_partitions must be >= 1, got {max_partitions}")
    if len(ranges) <= max_partitions:
        return list(ranges)
    loads = [0] * max_partitions
    members: List[List[int]] = [[] for _ in range(max_partitions)]
    by_size = sorted(range(len(ranges)), key=lambda i: (-_weight(ranges[i]), i))
    for i in by_size:
        g = min(range(max_partitions), key=lambda j: (loads[j], j))
        loads[g] += _weight(ranges[i])
        members[g].append(i)
    out: List[InputPartition] = []
    for idx in filter(None, members):
        picked = [ranges[i] for i in sorted(idx)]
        out.append(picked[0] if len(picked) == 1 else KafkaRangeGroup(tuple(picked)))
    return out
