"""Exactly-once under SIGKILLs at uniformly random times with the settings docs/operations.md
recommends, not only with ``keyed_process``'s defaults: the operator called once a batch for
each of 2 ranges of key groups (``parallelism=2``, the shuffle partitions) with each key's
records as Arrow (``records_format="arrow"``), and the source packing its records per key group
on every other run (``packedKeyGroups``). A range call runs every key group of its range in one
Python call and stores their snapshots together, so a kill lands in code the default layout
never runs; the checks are those of ``test_exactly_once_random_kills``: every input record in
the ``read_committed`` output exactly once, no open transaction of the sink, the group at the
last completed checkpoint. 10 kills by default (``BARRIER_KAFKA_RANDOM_KILLS`` /
``BARRIER_KAFKA_SLOW`` as there); the seed replays with ``BARRIER_KAFKA_RANDOM_SEED``.

A ``checkpointLocation`` keeps the parallelism it started with (Spark keeps the operator's state
per range), so every run of the test uses 2.
"""

from __future__ import annotations

import pytest

from integration_tests.pipeline_support import RECOMMENDED_OPERATOR, RUNTIMES_IN_BACKEND
from integration_tests.test_exactly_once_random_kills import (_kills,
                                                              kill_at_random_then_exactly_once)

KILLS = _kills(10)
#: Kills of the run with the runtimes in the state backend (``--runtime-store backend``).
BACKEND_KILLS = _kills(6)
#: Input a kill: these settings read several times faster than the defaults, and a run that
#: ends by itself before its kill fails the test (40 kills of 4,500 records did).
PER_KILL = 15_000


@pytest.mark.timeout(300 + 25 * KILLS)  # each kill: up to 14 s of run plus a restart
def test_sigkill_at_uniformly_random_times_with_recommended_settings(bootstrap, kafka_admin,
                                                                    topic_factory, tmp_path):
    kill_at_random_then_exactly_once(bootstrap, kafka_admin, topic_factory, tmp_path, KILLS,
                                     RECOMMENDED_OPERATOR, PER_KILL)


@pytest.mark.timeout(300 + 25 * BACKEND_KILLS)
def test_sigkill_at_uniformly_random_times_with_runtimes_in_the_backend(bootstrap, kafka_admin,
                                                                       topic_factory, tmp_path):
    """The same with each key group's state between batches in the state backend
    (``keyed_process(..., runtime_store="backend")``, :mod:`barrier_ops.batch_runtimes`): a kill
    lands in a runtime's write, its deletion of older ones, or between a batch's runtimes and
    its commit, and every run after it starts from the runtimes the last committed batch left."""
    kill_at_random_then_exactly_once(bootstrap, kafka_admin, topic_factory, tmp_path,
                                     BACKEND_KILLS, RECOMMENDED_OPERATOR + RUNTIMES_IN_BACKEND,
                                     PER_KILL)
