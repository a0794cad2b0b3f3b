"""Test helpers for keyed operators (importable by executors; no pytest dependency).

* :func:`make_script` - a deterministic multi-channel stream: records with keys, barriers per
  checkpoint at chosen offsets, split into micro-batches; barriers of one checkpoint may fall in
  different batches per channel (timestamp-cut placement).
* :func:`reference_counts` - keyed count over exactly the records before each checkpoint's cut.
* ``barrier-ops-script`` - a streaming data source replaying a script file batch by batch. Option
  ``path`` (JSON written by :func:`write_script`); optional ``release_path``: a file holding how
  many batches may be served so far (tests gate progress with it; absent = all); optional
  ``checkpoint.storage``: records the script's checkpoint settings there at start, as the
  barrier-kafka source does, so a 2PC sink on that storage accepts its barriers.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import random
from collections import Counter
from typing import Dict, Iterator, List, Optional, Tuple

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from barrier_core.schema import KIND_BARRIER, KIND_RECORD, channel_name, source_schema
from barrier_ops.snapshots import fold, snapshot_parts
from state_backends.base import checkpoint_dir

EPOCH_MS = 1767225600000  # 2026-01-01


def record_row(topic: str, partition: int, offset: int, key: Optional[str], value: str,
               epoch: Optional[int], ts_ms: Optional[int] = None) -> Tuple:
    """One source row (``source_schema()`` order) of kind ``record``."""
    ts = _dt.datetime.utcfromtimestamp((ts_ms if ts_ms is not None else EPOCH_MS + offset) / 1000)
    return (None if key is None else key.encode(), value.encode(), topic, partition, offset, ts,
            0, KIND_RECORD, epoch, None, None)


def barrier_row(topic: str, partition: int, offset: int, checkpoint_id: int,
                channels: List[str], ts_ms: Optional[int] = None) -> Tuple:
    ts = _dt.datetime.utcfromtimestamp(EPOCH_MS / 1000)
    return (None, None, topic, partition, offset, ts, 0, KIND_BARRIER, checkpoint_id,
            ts_ms if ts_ms is not None else EPOCH_MS + checkpoint_id, list(channels))


def make_script(seed: int, topic: str = "t", partitions: int = 2, records: int = 40,
                checkpoints: int = 3, batches: int = 4, keys: str = "abcde") -> dict:
    """A random but reproducible script.

    Returns ``{"batches": [[row dict, ...], ...], "cuts": {n: {channel: offset}},
    "records": [row dict, ...]}``; row dicts are JSON-able (see :func:`rows_of_batch`). Each
    channel's rows (records and barriers, in offset order) are split at random points into
    ``batches`` micro-batches independently per channel, so barrier n of one channel can land
    in a later batch than barrier n of another.
    """
    rng = random.Random(seed)
    channels = [channel_name(topic, p) for p in range(partitions)]
    per_batch: List[List[dict]] = [[] for _ in range(batches)]
    cuts: Dict[int, Dict[str, int]] = {n: {} for n in range(1, checkpoints + 1)}
    all_records = []
    for p, ch in enumerate(channels):
        positions = sorted(rng.randint(0, records) for _ in range(checkpoints))
        rows = []
        for o in range(records + 1):
            for n, pos in enumerate(positions, start=1):
                if pos == o:
                    cuts[n][ch] = o
                    rows.append({"kind": KIND_BARRIER, "topic": topic, "partition": p,
                                 "offset": o, "checkpoint_id": n, "channels": channels})
            if o < records:
                epoch = 1 + sum(1 for pos in positions if pos <= o)
                rec = {"kind": KIND_RECORD, "topic": topic, "partition": p, "offset": o,
                       "key": rng.choice(keys), "value": f"{ch}@{o}", "checkpoint_id": epoch}
                rows.append(rec)
                all_records.append(rec)
        splits = sorted(rng.randint(0, len(rows)) for _ in range(batches - 1))
        bounds = [0] + splits + [len(rows)]
        for b in range(batches):
            per_batch[b].extend(rows[bounds[b]:bounds[b + 1]])
    for rows in per_batch:
        rng.shuffle(rows)  # Spark does not keep row order: the operator must sort
    return {"batches": per_batch, "cuts": cuts, "records": all_records}


def rows_of_batch(batch: List[dict]) -> List[Tuple]:
    """Row dicts of a script -> source rows."""
    out = []
    for r in batch:
        if r["kind"] == KIND_RECORD:
            out.append(record_row(r["topic"], r["partition"], r["offset"], r["key"], r["value"],
                                  r["checkpoint_id"], r.get("timestamp")))
        else:
            out.append(barrier_row(r["topic"], r["partition"], r["offset"], r["checkpoint_id"],
                                   r["channels"], r.get("timestamp")))
    return out


def reference_counts(script: dict, checkpoint_id: Optional[int] = None) -> Counter:
    """Count per key of the records with epoch <= ``checkpoint_id`` (all records if None)."""
    return Counter(r["key"] for r in script["records"]
                   if checkpoint_id is None or r["checkpoint_id"] <= checkpoint_id)


def write_script(script: dict, path: str) -> str:
    with open(path, "w") as f:
        json.dump(script, f)
    return path


# ---------------------------------------------------------------------- streaming source
def _record_script_settings(storage: str) -> None:
    """Scripted barriers: no time interval, no idle seal, one checkpoint at a time (driver)."""
    from barrier_core.checkpoint_settings import CheckpointSettings, record_settings
    from state_backends.registry import backend_from_uri

    record_settings(backend_from_uri(storage), CheckpointSettings(0, 1, 0, 0, 1))


class _BatchPartition(InputPartition):
    def __init__(self, batch: int) -> None:
        self.batch = batch


class ScriptReader(DataSourceStreamReader):
    """Offsets on the driver, ``read`` on executors (the script is re-read there)."""

    def __init__(self, options) -> None:
        self.path = options["path"]
        self.release_path = options.get("release_path")
        self._seen = None  # newest end Spark planned: the start on PySpark < 4.2
        storage = options.get("checkpoint.storage")
        if storage:
            _record_script_settings(storage)

    def _batches(self) -> List[List[dict]]:
        with open(self.path) as f:
            return json.load(f)["batches"]

    def _released(self, total: int) -> int:
        if not self.release_path or not os.path.exists(self.release_path):
            return total
        with open(self.release_path) as f:
            text = f.read().strip()
        return min(total, int(text or 0))

    def initialOffset(self):
        return {"batch": 0}

    def latestOffset(self, start=None, limit=None):
        """One scripted batch per trigger, up to what is released (driver)."""
        total = len(self._batches())
        start = start or self._seen
        begin = int(start["batch"]) if start else 0
        self._seen = {"batch": max(begin, min(begin + 1, self._released(total)))}
        return self._seen

    def partitions(self, start, end):
        self._seen = end
        return [_BatchPartition(b) for b in range(int(start["batch"]), int(end["batch"]))]

    def read(self, partition: _BatchPartition) -> Iterator[Tuple]:
        yield from rows_of_batch(self._batches()[partition.batch])

    def commit(self, end) -> None:
        pass


class ScriptDataSource(DataSource):
    """``spark.readStream.format("barrier-ops-script").option("path", ...)``."""

    @classmethod
    def name(cls) -> str:
        return "barrier-ops-script"

    def schema(self):
        return source_schema()

    def streamReader(self, schema):
        return ScriptReader(self.options)


# ---------------------------------------------------------------------- snapshot inspection
def read_snapshot_state(backend, checkpoint_id: int, operator_id: str, key_group: int) -> dict:
    """Decoded snapshot of one key group, its parts folded when it is incremental
    (``{"state": {"keyed": {key: {name: value}}, ...}, "checkpoint_id": n, ...}``)."""
    import pickle

    blobs, path = snapshot_parts(backend, checkpoint_dir(checkpoint_id), operator_id,
                                 key_group, require_complete=False)
    header = pickle.loads(blobs[-1])
    snap, store = fold(blobs, path, operator_id, header["max_parallelism"])
    return {**{k: v for k, v in snap.items() if k not in ("changes", "chain")},
            "state": store.to_snapshot()}


def snapshot_values(backend, checkpoint_id: int, operator_id: str, max_parallelism: int,
                    name: str = "count") -> Counter:
    """``{key: value of state `name`}`` over every key group of a checkpoint (keys decoded)."""
    out: Counter = Counter()
    for kg in range(max_parallelism):
        snap = read_snapshot_state(backend, checkpoint_id, operator_id, kg)
        for key, slots in snap["state"]["keyed"].items():
            if name in slots:
                k = key.decode() if isinstance(key, bytes) else key
                out[k] = slots[name]
    return out


def script_frame(batch: List[dict]):
    """One script batch as the pandas frame Spark would hand a key group (tests only)."""
    import pandas as pd

    cols = [f.name for f in source_schema().fields]
    return pd.DataFrame(rows_of_batch(batch), columns=cols)
