"""``keyed_process(..., records_format="arrow")``: each key's records as a pyarrow RecordBatch
with the rows, order and values the pandas frame has (barrier_ops.arrow_records)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from barrier_core.schema import source_schema
from barrier_ops.arrow_records import ArrowKeyRows, arrow_record_types, to_record_batch
from barrier_ops.exceptions import InvalidOptionError
from barrier_ops.function import KeyedProcessFunction
from barrier_ops.options import OperatorOptions
from barrier_ops.runtime import KeyGroupRuntime
from barrier_ops.testing import make_script, reference_counts, script_frame
from state_backends.filesystem import FilesystemStateBackend


def test_records_format_is_pandas_or_arrow(tmp_path):
    assert OperatorOptions("c", str(tmp_path)).records_format == "pandas"
    assert OperatorOptions("c", str(tmp_path), records_format="arrow").records_format == "arrow"
    with pytest.raises(InvalidOptionError, match="'pandas'.*'arrow'.*got 'polars'"):
        OperatorOptions("c", str(tmp_path), records_format="polars")


def test_the_arrow_types_are_those_of_the_values_the_pandas_frame_holds():
    types = arrow_record_types(source_schema(), exclude=("value",))
    assert "value" not in types
    assert types["key"] == pa.binary() and types["topic"] == pa.string()
    assert types["partition"] == pa.int32() and types["offset"] == pa.int64()
    assert types["timestamp"] == pa.timestamp("ns")      # naive wall time, as in the frame
    assert types["checkpoint_timestamp"] == pa.int64()
    assert types["barrier_channels"] is None              # array<string>: inferred


def test_nan_and_nat_become_nulls_of_the_column_type_and_odd_values_are_inferred():
    rows = pd.DataFrame({
        "partition": [0.0, np.nan, 2.0],                  # ints with a null, as pandas has them
        "timestamp": pd.to_datetime([1, None, 3], unit="s"),
        "topic": ["t", None, "u"],
        "key": [b"a", b"b", None],
        "note": [1, 2, 3],                                # declared text, holds ints
    })
    types = {"partition": pa.int32(), "timestamp": pa.timestamp("ns"), "topic": pa.string(),
             "key": pa.binary(), "note": pa.string()}
    batch = to_record_batch(rows, types)
    assert batch.schema.names == list(rows.columns)
    assert batch.column("partition").type == pa.int32()
    assert batch.column("partition").to_pylist() == [0, None, 2]
    assert batch.column("timestamp").null_count == 1
    assert batch.column("timestamp").type == pa.timestamp("ns")
    assert batch.column("topic").to_pylist() == ["t", None, "u"]
    assert batch.column("key").to_pylist() == [b"a", b"b", None]
    assert batch.column("note").type == pa.int64() and batch.column("note").to_pylist() == [1, 2, 3]


def test_a_column_arrow_cannot_hold_is_named_with_the_ways_out():
    rows = pd.DataFrame({"offset": [1, 2], "mixed": [1, object()]})
    with pytest.raises(ValueError, match="column 'mixed'.*records_format='pandas'"):
        to_record_batch(rows, {"offset": pa.int64(), "mixed": pa.string()})


def test_a_key_gets_a_slice_of_one_batch():
    rows = pd.DataFrame({"key": [b"a", b"a", b"b"], "offset": [4, 7, 5]})
    cut = ArrowKeyRows(rows, {"key": pa.binary(), "offset": pa.int64()})
    first, second = cut(0, 2), cut(2, 3)
    assert isinstance(first, pa.RecordBatch)
    assert first.column("offset").to_pylist() == [4, 7] and second.num_rows == 1
    assert len(first) == 2


class Recorder(KeyedProcessFunction):
    """Counts per key and records what each call saw, as a pandas frame (tests only)."""

    def __init__(self):
        self.calls = []

    def process_records(self, key, records, state):
        seen = records.to_pandas() if isinstance(records, pa.RecordBatch) else records
        self.calls.append((key, type(records).__name__, seen.reset_index(drop=True)))
        n = state.value_state("n", 0)
        n.update(n.value() + len(records))
        return [(key.decode(), n.value())]


@pytest.mark.parametrize("seed", range(4))
def test_the_function_sees_the_same_records_as_arrow_as_as_pandas(tmp_path, seed):
    """Barriers of one checkpoint in different batches per channel (records held back): every
    call gets the same key and rows either way, and the output and snapshots are the same."""
    script = make_script(seed, partitions=3, records=60, checkpoints=3, batches=4)
    types = arrow_record_types(source_schema())
    outputs, calls = {}, {}
    for fmt in ("pandas", "arrow"):
        opts = OperatorOptions("c", FilesystemStateBackend(str(tmp_path / fmt), fsync=False), 1,
                               records_format=fmt)
        rt = KeyGroupRuntime.create(opts, 0)
        fn = Recorder()
        frames = [rt.process_batch(opts, fn, "key", ["word", "count"], script_frame(batch), 0,
                                   record_types=types)
                  for batch in script["batches"]]
        with warnings.catch_warnings():  # all-null columns of some batches: same both ways
            warnings.simplefilter("ignore", FutureWarning)
            outputs[fmt] = pd.concat(frames, ignore_index=True)
        calls[fmt] = fn.calls
    assert {kind for _, kind, _ in calls["arrow"]} == {"RecordBatch"}
    assert {kind for _, kind, _ in calls["pandas"]} == {"DataFrame"}
    assert [k for k, _, _ in calls["arrow"]] == [k for k, _, _ in calls["pandas"]]
    for (_, _, arrow), (_, _, frame) in zip(calls["arrow"], calls["pandas"]):
        assert list(arrow.columns) == list(frame.columns)
        for name in ("key", "value", "topic", "partition", "offset", "timestamp", "kind",
                     "checkpoint_id"):
            assert arrow[name].tolist() == frame[name].tolist(), name
    acks = {fmt: [_without_timings(a) for a in out.pop("ack") if a is not None]
            for fmt, out in outputs.items()}
    assert acks["arrow"] == acks["pandas"] and len(acks["arrow"]) == 3
    pd.testing.assert_frame_equal(outputs["arrow"], outputs["pandas"])
    records = outputs["arrow"][outputs["arrow"].kind == "record"]
    assert records.groupby("word")["count"].max().to_dict() == dict(reference_counts(script))


def _without_timings(ack: str) -> dict:
    import json

    out = json.loads(ack)
    out.pop("metrics"), out.pop("storage")
    return out
