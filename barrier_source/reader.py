"""``BarrierKafkaStreamReader``: Spark's Kafka source semantics plus checkpoint barriers.

Where things run (PySpark 4.0.5 to 4.3, see DESIGN.md):

* ``initialOffset``, ``latestOffset``, ``getDefaultReadLimit``, ``reportLatestOffset``,
  ``partitions`` and ``commit`` run on the driver in one long-lived Python worker spawned by the
  JVM. They talk to Kafka through one lazily created ``KafkaAdminClient``.
* ``read`` runs on executors on a pickled copy of the reader (the admin client is not pickled).

Per batch N Spark calls ``latestOffset(end of N-1)`` (only after batch N-1 committed, so that
offset is durably processed), writes the returned end offset to ``offsets/N``, calls
``commit(end of N-1)``, then ``partitions``/``read``. The checkpoint decision lives in the end
offset (see :mod:`barrier_source.offsets`), so a replay re-injects identical barriers.

Group offsets (notifyCheckpointComplete): in a source-only pipeline, the checkpoint sealed in a
durably processed offset is complete; it is committed from ``commit(end)`` and from
``latestOffset(start)`` (Spark keeps calling the latter while idle, so the last checkpoint is
committed even when no further batch runs). With ``checkpoint.storage`` set, the coordinator
decides completion and the source commits what ``_completed_offsets.json`` says. The commit runs
in a background thread of the planner worker (:mod:`barrier_source.async_group_commit`), so no
batch waits for it; a planning that starts no batch and ``stop()`` wait for it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from barrier_core.completed_offsets import read_completed_offsets
from barrier_core.exceptions import (BarrierKafkaError, InvalidOptionError,
                                     OffsetOutOfRangeError)
from barrier_core.jar_archives import keep_jar_directories
from barrier_core.kafka_config import client_config
from barrier_core.schema import source_schema, spark_arrow_schema, split_channel
from barrier_source.kafka_metadata import KafkaMetadata
from barrier_source.offsets import (PartitionOffsets, SourceOffset, offset_of, offsets_from_json,
                                    offsets_to_json, sorted_channels)
from barrier_source.options import PLACEMENT_END, PLACEMENT_TIMESTAMP, SourceOptions
from barrier_source.planner import count_rows, plan_end_offset, rate_limit
from barrier_source.range_groups import KafkaRangeGroup, pack_ranges, task_count
from barrier_source.read_limits import (ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows,
                                        SupportsTriggerAvailableNow)
from barrier_source.trigger import CheckpointTrigger, TriggerDecision, TriggerState

logger = logging.getLogger(__name__)


class KafkaRangePartition(InputPartition):
    """One Kafka partition's records ``[from_offset, until_offset)`` plus the barriers to emit in
    it. Picklable; created on the driver by ``partitions``.

    ``barriers``: ``(checkpoint_id, timestamp_ms, position, channels)`` emitted in this range.
    ``epochs``: ``(position, checkpoint_id)`` of every barrier at or after this range on this
    channel (emitted here or owed later), sorted; a record's epoch is the first id whose
    position is greater than its offset, else ``next_checkpoint_id``.
    """

    def __init__(self, topic: str, partition: int, from_offset: int, until_offset: int,
                 barriers: Tuple, epochs: Tuple, next_checkpoint_id: int) -> None:
        self.topic = topic
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset
        self.barriers = barriers
        self.epochs = epochs
        self.next_checkpoint_id = next_checkpoint_id

    def __repr__(self) -> str:
        return (f"KafkaRangePartition({self.topic}:{self.partition} "
                f"[{self.from_offset}, {self.until_offset}) barriers={len(self.barriers)})")


class BarrierKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stream reader of ``format("barrier-kafka")``. See the module docstring."""

    def __init__(self, options, schema) -> None:
        self.opts = SourceOptions.from_options(options)
        self.schema = schema
        self._trigger = CheckpointTrigger(self.opts.checkpoint_interval_ms,
                                          self.opts.checkpoint_interval_batches,
                                          self.opts.checkpoint_min_pause_ms,
                                          self.opts.max_concurrent_checkpoints)
        self._kafka = KafkaMetadata(self.opts)
        self._storage = None  # checkpoint.storage, opened on first use (driver)
        self._group_commits = None  # AsyncGroupCommits, started on first use (driver)
        self._last_end: Optional[SourceOffset] = None  # newest end offset Spark committed
        self._last_batch_ms = _now_ms()
        self._available_now: Optional[PartitionOffsets] = None
        self._latest: Optional[PartitionOffsets] = None
        self._initial: Optional[dict] = None  # initialOffset's answer, fixed once computed
        self._seen: Optional[dict] = None  # newest end offset Spark planned (PySpark < 4.2)
        self._guessed: Optional[Tuple[dict, dict]] = None  # (start, end) planned on a guess
        if self.opts.checkpoint_storage and self._trigger.is_enabled:
            self._record_checkpoint_settings()
            from barrier_core.query_run import record_run_start

            record_run_start(self._storage_backend(), _now_ms())  # a new run of the query

    def _record_checkpoint_settings(self) -> None:
        """Publish the trigger settings in checkpoint.storage for the sink (driver, at start;
        see :mod:`barrier_core.checkpoint_settings`)."""
        from barrier_core.checkpoint_settings import CheckpointSettings, record_settings

        o = self.opts
        record_settings(self._storage_backend(),
                        CheckpointSettings(o.checkpoint_interval_ms, o.checkpoint_interval_batches,
                                           o.idle_seal_ms, o.checkpoint_min_pause_ms,
                                           o.max_concurrent_checkpoints))

    def _storage_backend(self):
        """The state backend of ``checkpoint.storage``, opened once (driver)."""
        if self._storage is None:
            from state_backends.registry import backend_from_uri

            self._storage = backend_from_uri(self.opts.checkpoint_storage,
                                             dict(self.opts.storage_options))
        return self._storage

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_storage"] = None
        state["_group_commits"] = None
        return state

    def _commits(self):
        """The background consumer-group commits, started on first use (driver planner
        worker); their admin client is their own, not the planning thread's."""
        if self._group_commits is None:
            from barrier_source.async_group_commit import AsyncGroupCommits
            from barrier_source.group_commit import commit_group_offsets

            kafka = KafkaMetadata(self.opts)
            opts = self.opts

            def commit(checkpoint_id, offsets, restored_from):
                try:
                    commit_group_offsets(opts.kafka_config, opts.group_id, offsets,
                                         checkpoint_id, admin=kafka.admin(),
                                         restored_from=restored_from)
                except BarrierKafkaError:
                    kafka.close()  # the next commit opens a fresh client
                    raise

            self._group_commits = AsyncGroupCommits(commit, on_close=kafka.close)
        return self._group_commits

    # ------------------------------------------------------------------ Spark API (driver)
    def initialOffset(self) -> dict:
        """Resolve the starting offsets of a new query (startingOffsets & co.), once: Spark and
        the PySpark < 4.2 planning path may both ask, and must get the same answer.
        Runs in the driver planner worker."""
        if self._initial is None:
            self._initial = self._resolve_initial_offset()
        return self._initial

    def _resolve_initial_offset(self) -> dict:
        parts = self._kafka.topic_partitions(strict=True)
        starting = self.opts.starting
        earliest = self._kafka.list_offsets(parts, "earliest")
        latest = self._kafka.list_offsets(parts, "latest")
        if starting.kind == "earliest":
            offsets = earliest
        elif starting.kind == "latest":
            offsets = latest
        elif starting.kind == "offsets":
            offsets = self._specific_offsets(parts, starting.offsets, earliest, latest)
        elif starting.kind == "timestamp":
            offsets = self._timestamp_offsets(parts, starting, latest)
        else:
            offsets = self._group_offsets(parts, earliest, latest)
        if self.opts.restore_from is not None:
            return self._restored_initial_offset(offsets, earliest, latest).to_json()
        logger.info("barrier-kafka: starting offsets %s", offsets_to_json(offsets))
        return SourceOffset(offsets).to_json()

    def _restored_initial_offset(self, offsets, earliest, latest) -> SourceOffset:
        """A new query started from checkpoint/savepoint n (``execution.savepoint.path``): its
        offsets win over ``startingOffsets``; numbering continues at n + 1 (driver)."""
        from barrier_source.options import parse_restore_spec
        from state_backends.checkpoint_store import CompletedCheckpointStore
        from state_backends.registry import backend_from_uri

        storage, spec = self.opts.checkpoint_storage, self.opts.restore_from
        done = read_completed_offsets(self._storage_backend())
        if done is not None:
            raise InvalidOptionError(
                f"Option 'execution.savepoint.path' = {spec!r}: checkpoint.storage already "
                f"holds checkpoints up to {done.checkpoint_id} of another query. A restored "
                "query needs a checkpoint.storage of its own: copy the savepoint into a new one "
                "(CompletedCheckpointStore.copy_savepoint / create_savepoint(target=...)).")
        checkpoint_id, savepoint = parse_restore_spec(spec)
        store = CompletedCheckpointStore(backend_from_uri(storage, self.opts.storage_options))
        point = store.restore(checkpoint_id=checkpoint_id, savepoint=savepoint)
        restored = offsets_from_json(point.source_offsets, f"offsets of {point.location}")
        out = {t: dict(parts) for t, parts in offsets.items()}
        for t, parts in out.items():
            for p in parts:
                if p in restored.get(t, {}):
                    parts[p] = self._in_range(restored[t][p], earliest[t][p], latest[t][p],
                                              f"execution.savepoint.path {spec}: {t}:{p} offset "
                                              f"{restored[t][p]}")
        n = point.checkpoint_id
        logger.info("barrier-kafka: restored from checkpoint %d (%s): starting offsets %s; next "
                    "checkpoint %d", n, spec, offsets_to_json(out), n + 1)
        return SourceOffset(out, next_checkpoint_id=n + 1, restored_id=n)

    def _specific_offsets(self, parts, given, earliest, latest) -> PartitionOffsets:
        missing = [f"{t}:{p}" for t in parts for p in parts[t] if p not in given.get(t, {})]
        if missing:
            raise InvalidOptionError(f"Option 'startingOffsets' must give an offset for every "
                                     f"partition; missing {missing}.")
        out: PartitionOffsets = {}
        for t in parts:
            for p in parts[t]:
                n = given[t][p]
                if n == -2:
                    n = earliest[t][p]
                elif n == -1:
                    n = latest[t][p]
                else:
                    n = self._in_range(n, earliest[t][p], latest[t][p],
                                       f"Option 'startingOffsets': {t}:{p} offset {n}")
                out.setdefault(t, {})[p] = n
        return out

    def _in_range(self, n: int, earliest: int, latest: int, what: str) -> int:
        """``n`` if within ``[earliest, latest]``; else fail (failOnDataLoss) or clamp."""
        if earliest <= n <= latest:
            return n
        msg = f"{what} is out of range [{earliest}, {latest}]."
        if self.opts.fail_on_data_loss:
            raise OffsetOutOfRangeError(msg + " Set failOnDataLoss=false to clamp.")
        logger.warning("barrier-kafka: %s Clamped (failOnDataLoss=false).", msg)
        return min(max(n, earliest), latest)

    def _timestamp_offsets(self, parts, starting, latest) -> PartitionOffsets:
        if starting.timestamp_ms is not None:
            stamps = {(t, p): starting.timestamp_ms for t in parts for p in parts[t]}
            option = "startingTimestamp"
        else:
            option = "startingOffsetsByTimestamp"
            missing = [f"{t}:{p}" for t in parts for p in parts[t]
                       if p not in starting.timestamps.get(t, {})]
            if missing:
                raise InvalidOptionError(f"Option '{option}' must give a timestamp for every "
                                         f"partition; missing {missing}.")
            stamps = {(t, p): starting.timestamps[t][p] for t in parts for p in parts[t]}
        found = self._kafka.list_offsets(parts, stamps)
        out: PartitionOffsets = {}
        for t in parts:
            for p in parts[t]:
                n = found[t][p]
                if n < 0:
                    if self.opts.starting_by_timestamp_strategy == "error":
                        raise InvalidOptionError(
                            f"Option '{option}': no record of {t}:{p} has a timestamp >= "
                            f"{stamps[(t, p)]}. Set startingOffsetsByTimestampStrategy=latest to "
                            "start at the latest offset instead.")
                    n = latest[t][p]
                out.setdefault(t, {})[p] = n
        return out

    def _group_offsets(self, parts, earliest, latest) -> PartitionOffsets:
        group = self.opts.group_id
        committed = self._kafka.group_offsets(group, parts)
        out: PartitionOffsets = {}
        for t, p in ((t, p) for t in parts for p in parts[t]):
            n = committed.get(t, {}).get(p, -1)
            if n < 0:
                fallback = self.opts.group_offsets_fallback
                if fallback == "none":
                    raise InvalidOptionError(
                        f"startingOffsets=group: consumer group '{group}' has no committed offset "
                        f"for {t}:{p}; set groupOffsetsFallback=earliest|latest.")
                n = earliest[t][p] if fallback == "earliest" else latest[t][p]
            else:
                n = self._in_range(n, earliest[t][p], latest[t][p],
                                   f"startingOffsets=group: group '{group}' offset {n} of {t}:{p}")
            out.setdefault(t, {})[p] = n
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        """Spark's admission control from ``maxOffsetsPerTrigger`` / ``minOffsetsPerTrigger``
        (driver planner worker)."""
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: freeze the target at the offsets available now.
        Runs in the driver planner worker."""
        parts = self._kafka.topic_partitions(strict=False)
        self._available_now = self._kafka.list_offsets(parts, "latest")

    def reportLatestOffset(self) -> Optional[dict]:
        """The newest offsets seen at the last planning, for progress reports (driver planner
        worker)."""
        return None if self._latest is None else offsets_to_json(self._latest)

    def latestOffset(self, start: Optional[dict] = None,
                     limit: Optional[ReadLimit] = None) -> dict:
        """Plan the next batch; see :func:`barrier_source.planner.plan_end_offset`.
        Runs in the driver planner worker.

        PySpark >= 4.2 passes the batch's start and read limit. PySpark 4.0 and 4.1 pass
        neither: the start is then the newest offset Spark planned, which this reader saw in
        ``partitions`` (at a restart Spark announces the offset log's newest entry as
        ``partitions(end, end)``), or ``initialOffset`` for a new query; the limit is
        ``getDefaultReadLimit()``.

        The consumer-group commit of the newest completed checkpoint runs in the background
        (:mod:`barrier_source.async_group_commit`) while batches are planned; a planning that
        starts no batch returns only once that commit is done."""
        guessed = start is None
        if guessed:
            start = self._seen if self._seen is not None else self.initialOffset()
        if limit is None:
            limit = self.getDefaultReadLimit()
        planned = self._plan(start, limit)
        if planned == start and self._group_commits is not None:
            # No batch: the query may be about to end (the last planning of an AvailableNow
            # run, a caught-up query before its stop). Spark does not wait for this worker's
            # stop(), so the group commit of the newest completed checkpoint finishes here, off
            # every batch's path.
            self._group_commits.flush()
        self._seen = planned
        self._guessed = (start, planned) if guessed else None
        return planned

    def _plan(self, start: dict, limit: ReadLimit) -> dict:
        prev = SourceOffset.from_json(start)
        self._last_end = prev
        self._commit_completed(prev)
        now = _now_ms()  # before listing offsets: the timestamp cut needs latest >= trigger time
        parts = self._kafka.topic_partitions(strict=False)
        latest = self._kafka.list_offsets(parts, "latest")
        starts, new_parts = self._resolve_starts(prev, parts)
        latest = self._check_latest(starts, latest)
        if self._available_now is not None:
            target = self._available_now
            latest = {t: {p: min(latest[t][p], target.get(t, {}).get(p, starts[t][p]))
                          for p in latest[t]} for t in latest}
        self._latest = latest
        ends = latest
        if not isinstance(limit, ReadAllAvailable):
            max_rows = self.opts.max_offsets_per_trigger
            if isinstance(limit, ReadMaxRows):
                max_rows = limit.max_rows
            ends = rate_limit(starts, latest, max_rows, owed=_owed_positions(prev))
            min_rows = self.opts.min_offsets_per_trigger
            if isinstance(limit, ReadMinRows):
                min_rows = limit.min_rows
            if (min_rows is not None and self._available_now is None
                    and count_rows(starts, latest) < min_rows
                    and now - self._last_batch_ms < self.opts.max_trigger_delay_ms):
                return start
        idle = count_rows(starts, ends) == 0 and not self._owes_emittable(prev, ends)
        if idle and not self._idle_seal_due(prev, now):
            return start  # nothing to read: Spark runs no batch for an unchanged offset
        completed_id, aborted = self._checkpoint_progress(prev)
        decision = self._trigger.decide(
            TriggerState(prev.next_checkpoint_id, prev.last_trigger_ms,
                         prev.batches_since_trigger), now, completed_id, aborted, due=idle)
        placement = self.opts.barrier_placement
        if idle:
            if decision is not TriggerDecision.TRIGGER:
                return start  # a checkpoint is still pending: seal once it is done
            logger.info("barrier-kafka: idle with records after the last barrier: checkpoint "
                        "%d sealed by a barrier-only batch", prev.next_checkpoint_id)
            placement = PLACEMENT_END  # nothing to read: the barrier goes at the current end
        elif decision is not TriggerDecision.TRIGGER and decision is not TriggerDecision.DISABLED:
            logger.debug("barrier-kafka: no checkpoint in this batch: %s", decision.value)
        cut = None
        if decision is TriggerDecision.TRIGGER and placement == PLACEMENT_TIMESTAMP:
            cut = self._timestamp_cut(parts, now, latest)
        planned = plan_end_offset(prev, starts, ends, new_parts, decision, now, placement, cut)
        self._last_batch_ms = now
        return planned.to_json()

    def _idle_seal_due(self, prev: SourceOffset, now_ms: int) -> bool:
        """Records after the newest barrier wait in pre-committed transactions while the source
        is idle: seal them with a barrier-only batch once ``idle-seal-after`` passed (or at the
        end of an AvailableNow run), so no transaction outlives its timeout (driver)."""
        if not self._trigger.is_enabled or prev.batches_since_trigger == 0 \
                or self.opts.idle_seal_ms <= 0:
            return False
        if self._available_now is not None:
            return True  # the run ends here: seal what it read
        since = max(self._last_batch_ms, prev.last_trigger_ms or 0)
        return now_ms - since >= self.opts.idle_seal_ms

    @staticmethod
    def _owes_emittable(prev: SourceOffset, ends: PartitionOffsets) -> bool:
        return any(offset_of(ends, c) is not None and b.positions[c] <= offset_of(ends, c)
                   for b in prev.barriers for c in b.owed)

    def _resolve_starts(self, prev: SourceOffset, parts) -> Tuple[PartitionOffsets,
                                                                  PartitionOffsets]:
        """Start of every current partition; new partitions start at earliest (as Spark)."""
        known = prev.offsets
        gone = [f"{t}:{p}" for t in known for p in known[t] if p not in parts.get(t, [])]
        if gone:
            msg = f"partitions {gone} disappeared (topic deleted or recreated)."
            if self.opts.fail_on_data_loss:
                raise OffsetOutOfRangeError(f"barrier-kafka: {msg} Set failOnDataLoss=false to "
                                            "continue without them.")
            logger.warning("barrier-kafka: %s Continuing (failOnDataLoss=false).", msg)
        fresh = {t: [p for p in parts[t] if p not in known.get(t, {})] for t in parts}
        fresh = {t: ps for t, ps in fresh.items() if ps}
        new_parts = self._kafka.list_offsets(fresh, "earliest") if fresh else {}
        if new_parts:
            logger.info("barrier-kafka: new partitions %s start at earliest",
                        offsets_to_json(new_parts))
        starts = {t: {p: known.get(t, {}).get(p, new_parts.get(t, {}).get(p, 0))
                      for p in parts[t]} for t in parts}
        return starts, new_parts

    def _check_latest(self, starts, latest) -> PartitionOffsets:
        for t in latest:
            for p in latest[t]:
                if latest[t][p] < starts[t][p]:
                    msg = (f"{t}:{p} log end {latest[t][p]} is before the processed offset "
                           f"{starts[t][p]} (partition truncated or topic recreated).")
                    if self.opts.fail_on_data_loss:
                        raise OffsetOutOfRangeError(f"barrier-kafka: {msg} Set "
                                                    "failOnDataLoss=false to skip.")
                    logger.warning("barrier-kafka: %s (failOnDataLoss=false)", msg)
        return latest

    def _timestamp_cut(self, parts, now_ms: int, latest) -> Dict[str, int]:
        """First offset per partition with timestamp >= now_ms, capped at the log end."""
        found = self._kafka.list_offsets(parts, {(t, p): now_ms for t in parts for p in parts[t]})
        cut = {}
        for c in sorted_channels(latest):
            t, p = split_channel(c)
            n = found[t][p]
            cut[c] = latest[t][p] if n < 0 else min(n, latest[t][p])
        return cut

    def _checkpoint_progress(self, prev: SourceOffset) -> Tuple[int, frozenset]:
        """Newest completed checkpoint and the aborted ones after it (driver planner worker).
        With a coordinator (``checkpoint.storage``) both come from its durable state, so an
        expired or declined checkpoint frees its max-concurrent slot."""
        if self.opts.checkpoint_storage:
            from barrier_coordinator.durable import checkpoint_progress

            done, aborted = checkpoint_progress(self._storage_backend())
            return max(done, prev.restored_id), aborted
        return max(prev.sealed_id, prev.restored_id), frozenset()

    def _commit_completed(self, durable: SourceOffset) -> None:
        """notifyCheckpointComplete: commit the newest completed checkpoint to the group, in
        the background (:mod:`barrier_source.async_group_commit`)."""
        if not (self.opts.commit_offsets_on_checkpoint and self._trigger.is_enabled):
            return
        if self.opts.checkpoint_storage:
            done = read_completed_offsets(self._storage_backend())
            if done is None:
                return
            cid, offsets = done.checkpoint_id, done.offsets
        elif durable.sealed is not None:
            cid, offsets = durable.sealed.checkpoint_id, durable.sealed.offsets
        else:
            return
        self._commits().submit(cid, offsets, durable.restored_id)

    def commit(self, end: dict) -> None:
        """Spark finished every batch up to ``end``: commit its sealed checkpoint.
        Runs in the driver planner worker."""
        self._last_end = SourceOffset.from_json(end)
        self._commit_completed(self._last_end)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """One input partition per Kafka partition with records or barriers in ``[start, end)``,
        or with ``maxPartitions`` / ``minRecordsPerPartition`` those ranges packed into fewer
        (:mod:`barrier_source.range_groups`); driver planner worker, the partitions are pickled
        to executors. ``start == end`` is an empty batch: PySpark < 4.2 announces the offset
        log's newest entry that way at a restart."""
        self._check_guessed_start(start, end)
        self._seen = end
        if start == end:
            return []
        s, e = SourceOffset.from_json(start), SourceOffset.from_json(end)
        out: List[InputPartition] = []
        ended = {c for b in e.barriers for c in b.emit if offset_of(e.offsets, c) is None}
        for c in sorted_channels(e.offsets) + sorted(ended):
            t, p = split_channel(c)
            until = offset_of(e.offsets, c)
            if until is None:  # vanished: only its end-of-partition barrier, nothing to read
                until = max(b.positions[c] for b in e.barriers if c in b.emit)
            begin = offset_of(s.offsets, c)
            if begin is None:
                begin = offset_of(e.new_partitions, c)
            if begin is None or c in ended:
                begin = until
            barriers = tuple((b.checkpoint_id, b.timestamp_ms, b.positions[c], b.channels)
                             for b in e.barriers if c in b.emit)
            epochs = tuple(sorted((b.positions[c], b.checkpoint_id) for b in e.barriers
                                  if c in b.emit or c in b.owed))
            if begin >= until and not barriers:
                continue
            out.append(KafkaRangePartition(t, p, begin, max(begin, until), barriers, epochs,
                                           e.next_checkpoint_id))
        tasks = task_count(out, self.opts.max_partitions, self.opts.min_records_per_partition)
        return pack_ranges(out, tasks) if tasks < len(out) else out

    def _check_guessed_start(self, start: dict, end: dict) -> None:
        """PySpark < 4.2: refuse a batch whose end was planned from another start than the one
        Spark runs it from (its barriers and ids would be wrong). Spark only does that when it
        asks for the latest offset before announcing where it stands, i.e. with
        ``spark.sql.streaming.triggerAvailableNowWrapper.enabled`` (driver planner worker)."""
        if self._guessed is not None and self._guessed[1] == end and self._guessed[0] != start:
            raise BarrierKafkaError(
                "barrier-kafka: Spark asked this source for its latest offset before telling it "
                "where the query stands, and then ran the batch from elsewhere; nothing was "
                "read. On PySpark 4.0/4.1 this happens with Trigger.AvailableNow when "
                "spark.sql.streaming.triggerAvailableNowWrapper.enabled is true: unset it "
                "(AvailableNow then runs one batch, like Trigger.Once) or use PySpark >= 4.2.")

    # ------------------------------------------------------------------ executors
    def read(self, partition) -> Iterator[Any]:
        """Yield ``pyarrow.RecordBatch``es: the range's records with barrier rows in place; for a
        :class:`~barrier_source.range_groups.KafkaRangeGroup` (``maxPartitions``), each of its
        ranges so in turn. Runs on the executor."""
        keep_jar_directories()
        if isinstance(partition, KafkaRangeGroup):
            for one in partition.ranges:
                yield from self._read_range(one)
        else:
            yield from self._read_range(partition)

    def _read_range(self, partition: KafkaRangePartition) -> Iterator[Any]:
        """The range's batches: one row per record, or packed per key group with
        ``packedKeyGroups`` (:func:`~barrier_core.packed_source.pack`) (executor)."""
        n = self.opts.packed_key_groups
        if n is None:
            yield from self._read_rows(partition, self.schema)
            return
        from barrier_core.packed_source import pack

        packed = spark_arrow_schema(self.schema)
        for batch in self._read_rows(partition, source_schema(self.opts.include_headers)):
            yield pack(batch, packed, n)

    def _read_rows(self, partition: KafkaRangePartition, schema) -> Iterator[Any]:
        """The range's records with barrier rows in place, one row each, of ``schema``."""
        from barrier_source.arrow_rows import RowBuilder
        from barrier_source.kafka_read import fetch_range

        builder = RowBuilder(schema, partition, self.opts.include_headers)
        pending = sorted(partition.barriers, key=lambda b: b[2])
        records = fetch_range(
            client_config(self.opts.kafka_config, "consumer"), partition.topic,
            partition.partition, partition.from_offset, partition.until_offset,
            fail_on_data_loss=self.opts.fail_on_data_loss,
            poll_timeout_ms=self.opts.poll_timeout_ms, with_headers=self.opts.include_headers)
        for chunk in records:
            while pending and len(chunk) and chunk.offsets[-1] >= pending[0][2]:
                cut = int(np.searchsorted(chunk.offsets, pending[0][2], side="left"))
                if cut:
                    yield builder.records(chunk.slice(0, cut))
                yield builder.barrier(pending.pop(0))
                chunk = chunk.slice(cut, len(chunk))
            if len(chunk):
                yield builder.records(chunk)
        for b in pending:
            yield builder.barrier(b)

    def stop(self) -> None:
        """The query stops (driver planner worker): commit the newest completed checkpoint's
        offsets to the consumer group first and wait for the background commits, so a stopped
        job's group is not one checkpoint behind (on a cluster the sink completes it after the
        source's last ``commit``), then close the admin clients. PySpark calls this when the
        planner worker's connection closes and Spark does not wait for it, which is why a
        planning that starts no batch already waits for the commit (``latestOffset``)."""
        try:
            if self.opts.checkpoint_storage and self._last_end is not None:
                self._commit_completed(self._last_end)
            if self._group_commits is not None:
                self._group_commits.flush()
        finally:
            try:
                if self._group_commits is not None:
                    self._group_commits.close()
                    self._group_commits = None
            finally:
                self._kafka.close()


def _owed_positions(prev: SourceOffset) -> Dict[str, int]:
    """``{channel: position}`` of the barriers ``prev`` still owes (the furthest per channel)."""
    out: Dict[str, int] = {}
    for b in prev.barriers:
        for c in b.owed:
            out[c] = max(out.get(c, 0), b.positions[c])
    return out


def _now_ms() -> int:
    return int(time.time() * 1000)
