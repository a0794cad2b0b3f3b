"""keyed_process(..., parallelism=N): Spark calls the operator once per range of key groups
(issue 15); every key group inside runs exactly as it runs alone."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from barrier_core.schema import source_schema
from barrier_ops.arrow_records import arrow_record_types

from barrier_ops.examples.word_count import CountPerKey
from barrier_ops.exceptions import InvalidOptionError
from barrier_ops.key_group_state import (KEY_GROUP_COLUMN, RANGE_COLUMN, load_runtime,
                                         run_batch, run_range)
from barrier_ops.keygroups import (key_group_of, operator_index, range_group_keys,
                                   spark_hash_int)
from barrier_ops.options import OperatorOptions
from barrier_ops.testing import make_script, reference_counts, script_frame, snapshot_values
from state_backends.filesystem import FilesystemStateBackend

MAXP = 8


def test_spark_hash_of_ints_matches_spark():
    # Spark 4: SELECT hash(CAST(id AS INT)) FROM range(6)
    assert [spark_hash_int(i) for i in range(6)] == [
        933211791, -559580957, 1765031574, -1823081949, -397064898, 1023896466]


@pytest.mark.parametrize("parallelism", [1, 2, 3, 4, 8, 16, 128])
def test_each_range_gets_its_own_spark_partition(parallelism):
    keys = range_group_keys(parallelism)
    assert [spark_hash_int(k) % parallelism for k in keys] == list(range(parallelism))
    assert keys == range_group_keys(parallelism)   # a function of the parallelism alone


@pytest.mark.parametrize("max_parallelism,parallelism", [(128, 2), (128, 3), (8, 8), (10, 4)])
def test_ranges_are_contiguous_and_cover_every_key_group(max_parallelism, parallelism):
    index = [operator_index(kg, max_parallelism, parallelism) for kg in range(max_parallelism)]
    assert index == sorted(index) and set(index) == set(range(parallelism))


def key_group_frames(batch):
    """Each key group's rows of a script batch: its records plus every marker row."""
    pdf = script_frame(batch)
    frames = {}
    for kg in range(MAXP):
        mine = pdf[(pdf["kind"] != "record")
                   | pdf["key"].map(lambda k: key_group_of(k, MAXP) == kg)].copy()
        if len(mine):
            mine[KEY_GROUP_COLUMN] = kg
            frames[kg] = mine.reset_index(drop=True)
    return frames


class Seen(CountPerKey):
    """CountPerKey that records each call's key and its records' offsets and timestamps."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def process_records(self, key, records, state):
        if isinstance(records, pa.RecordBatch):
            offsets = records.column("offset").to_pylist()
            stamps = [pd.Timestamp(t) for t in records.column("timestamp").to_pylist()]
        else:
            offsets, stamps = records["offset"].tolist(), list(records["timestamp"])
        self.calls.append((key, offsets, stamps))
        return super().process_records(key, records, state)


@pytest.mark.parametrize("records_format", ["pandas", "arrow"])
@pytest.mark.parametrize("seed", range(6))
def test_a_range_runs_each_key_group_as_it_runs_alone(seed, records_format, tmp_path):
    """The range is cut into its key groups by one sort, converted to Arrow once (records as
    Arrow) and its output built in one frame; each key group still gets the same calls,
    records, snapshots and output as when it runs alone, whatever order its rows arrive in."""
    script = make_script(seed, partitions=3, records=40, checkpoints=3, batches=4,
                         keys="abcdefghij")
    alone_backend, ranged_backend = (FilesystemStateBackend(str(tmp_path / name), fsync=False)
                                     for name in ("alone", "ranged"))
    alone = OperatorOptions("count", alone_backend, MAXP, records_format=records_format)
    ranged = OperatorOptions("count", ranged_backend, MAXP, parallelism=3,
                             records_format=records_format)
    types = arrow_record_types(source_schema()) if records_format == "arrow" else None
    alone_fn, ranged_fn = Seen(), Seen()
    blobs, range_blobs, alone_out, ranged_out = {}, {}, [], []
    rng = np.random.default_rng(seed)
    for batch_no, batch in enumerate(script["batches"]):
        frames = key_group_frames(batch)
        for kg, frame in frames.items():
            out, blobs[kg] = run_batch(alone, alone_fn, "key", ["word", "count"], kg,
                                       blobs.get(kg), [frame], 1000 * batch_no,
                                       record_types=types)
            alone_out.append(out)
        for index in range(3):
            parts = [f.assign(**{RANGE_COLUMN: -1}) for kg, f in frames.items()
                     if operator_index(kg, MAXP, 3) == index]
            if not parts:
                continue
            rows = pd.concat(parts, ignore_index=True)   # key groups interleaved, as shuffled
            rows = rows.take(rng.permutation(len(rows))).reset_index(drop=True)
            out, range_blobs[index] = run_range(ranged, ranged_fn, "key", ["word", "count"],
                                                index, range_blobs.get(index), [rows],
                                                1000 * batch_no, record_types=types)
            ranged_out.append(out)
    # the same calls in the same order: key groups ascending, each one's keys as when alone
    assert ranged_fn.calls == alone_fn.calls and alone_fn.calls
    for n in range(1, 4):
        assert (snapshot_values(ranged_backend, n, "count", MAXP)
                == snapshot_values(alone_backend, n, "count", MAXP)
                == reference_counts(script, n))

    def by_channel(outputs):
        rows = [row for out in outputs for row in out.astype(object).where(out.notna(), None)
                .to_dict("records") if row["kind"] != "ack"]   # an ack names its backend
        return sorted(rows, key=lambda r: (r["partition"], r["offset"], r["kind"]))

    assert by_channel(ranged_out) == by_channel(alone_out)
    # the range's state is each of its key groups' own runtime value
    for index, blob in range_blobs.items():
        state = pickle.loads(blob)
        assert state["layout"] == (MAXP, 3, index)
        assert all(operator_index(kg, MAXP, 3) == index for kg in state["key_groups"])
        for kg, value in state["key_groups"].items():
            assert (load_runtime(value).store.to_snapshot()
                    == load_runtime(blobs[kg]).store.to_snapshot())


def test_changing_parallelism_under_a_running_query_is_refused(tmp_path):
    backend = FilesystemStateBackend(str(tmp_path), fsync=False)
    script = make_script(1, partitions=2, records=10, checkpoints=1, batches=1)
    frames = key_group_frames(script["batches"][0])
    kg, frame = next(iter(frames.items()))
    alone = OperatorOptions("count", backend, MAXP)
    _, kg_blob = run_batch(alone, CountPerKey(), "key", ["word", "count"], kg, None, [frame], 0)
    ranged = OperatorOptions("count", backend, MAXP, parallelism=2)
    index = operator_index(kg, MAXP, 2)
    part = frame.assign(**{RANGE_COLUMN: -1})
    with pytest.raises(InvalidOptionError, match="one Spark group per key group.*restore_from"):
        run_range(ranged, CountPerKey(), "key", ["word", "count"], index, kg_blob, [part], 0)
    _, range_blob = run_range(ranged, CountPerKey(), "key", ["word", "count"], index, None,
                              [part], 0)
    with pytest.raises(InvalidOptionError, match="written with parallelism=2.*now runs with "
                                                 "parallelism=None"):
        load_runtime(range_blob)
    other = OperatorOptions("count", backend, MAXP, parallelism=4)
    with pytest.raises(InvalidOptionError, match="parallelism=2 and the operator now runs "
                                                 "with max_parallelism=8, parallelism=4"):
        run_range(other, CountPerKey(), "key", ["word", "count"], index, range_blob, [part], 0)


@pytest.mark.parametrize("bad", [0, 9, True, 1.5, "2"])
def test_parallelism_out_of_range_is_refused(bad, tmp_path):
    with pytest.raises(InvalidOptionError, match="parallelism must be None .* or an int in "
                                                 r"\[1, max_parallelism=8\]"):
        OperatorOptions("count", str(tmp_path), MAXP, parallelism=bad)
