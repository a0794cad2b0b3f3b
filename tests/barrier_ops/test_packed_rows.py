"""OutputRows.packed_frame: unpacked the way barrier_ops.packed_rows.unpack does it in the JVM,
it gives the rows of OutputRows.frame, in order, for any mix of record blocks and control rows
and any number of records a packed row may hold."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from barrier_ops.output_rows import CONTROL_COLUMNS, OutputRows
from barrier_ops.packed_rows import PACKED_COUNT

COLUMNS = ["word", "count"]


def random_rows(seed: int) -> OutputRows:
    rng = random.Random(seed)
    out = OutputRows(COLUMNS)
    ts = pd.Timestamp("2026-01-01", tz="UTC")
    for _ in range(rng.randrange(0, 15)):
        if rng.random() < 0.6:
            rows = [(f"w{rng.randrange(9)}", rng.choice([1, 2 ** 53 + 1, None]))
                    for _ in range(rng.randrange(0, 80))]
            out.add_records(rows, "op:c", rng.randrange(4), rng.randrange(1000), ts,
                            rng.randrange(1, 5))
        else:
            out.add_control(**rng.choice([
                dict(kind="ack", checkpoint_id=3, topic="t", partition=None, ack='{"a": 1}'),
                dict(kind="barrier", checkpoint_id=4, topic="op:c", partition=2, offset=7,
                     checkpoint_timestamp=99, barrier_channels=["op:c:0"])]))
    return out


def unpacked(packed: pd.DataFrame) -> list:
    """``explode(sequence(0, __n - 1))`` and ``get(c, pos)``, row by row."""
    rows = []
    for row in packed.to_dict("records"):
        for pos in range(row[PACKED_COUNT]):
            rows.append([None if row[c] is None else row[c][pos] for c in COLUMNS]
                        + [row[c] + pos if c == "offset" and not pd.isna(row[c]) else row[c]
                           for c in CONTROL_COLUMNS])
    return rows


def plain(rows) -> list:
    """Null as None, and an integral float (a control column with nulls) as an int."""
    def value(v):
        if isinstance(v, list):
            return v
        if pd.isna(v):
            return None
        return int(v) if isinstance(v, float) and v.is_integer() else v
    return [[value(v) for v in row] for row in rows]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("max_records", [1, 3, 32])
def test_packed_frame_unpacks_to_the_rows_of_frame(seed, max_records):
    out = random_rows(seed)
    packed = out.packed_frame(max_records)
    assert list(packed.columns) == COLUMNS + CONTROL_COLUMNS + [PACKED_COUNT]
    assert (packed[PACKED_COUNT] <= max_records).all() and (packed[PACKED_COUNT] >= 1).all()
    assert plain(unpacked(packed)) == plain(out.frame().astype(object).values.tolist())


def test_a_block_is_split_into_rows_of_at_most_max_records():
    out = OutputRows(COLUMNS)
    out.add_records([(f"w{i}", i) for i in range(70)], "op:c", 1, 100, None, 2)
    out.add_control(kind="barrier", checkpoint_id=2, topic="op:c", partition=1, offset=170,
                    checkpoint_timestamp=5, barrier_channels=["op:c:1"])
    packed = out.packed_frame(32)
    assert packed[PACKED_COUNT].tolist() == [32, 32, 6, 1]
    assert packed["offset"].tolist() == [100, 132, 164, 170]
    assert list(packed["count"].iloc[1]) == list(range(32, 64)) and packed["word"].iloc[3] is None
    assert packed[PACKED_COUNT].dtype == np.int32


def test_integers_above_2_pow_53_stay_exact_beside_null_control_rows():
    """pandas made such a column float64 (the control row's null), and 2**53 + 1 became 2**53."""
    out = OutputRows(COLUMNS)
    out.add_records([("w", 2 ** 53 + 1)], "op:c", 0, 0, None, 1)
    out.add_control(kind="ack", checkpoint_id=1, topic="op:c", partition=0, ack="{}")
    assert out.frame()["count"].tolist()[0] == 2 ** 53 + 1


def test_only_nullable_columns_of_plain_types_with_free_names_are_packed():
    from pyspark.sql.types import (ArrayType, DecimalType, LongType, StringType, StructField,
                                   StructType, TimestampType)

    from barrier_ops.packed_rows import packable

    def schema(*fields):
        return StructType([StructField(*f) for f in fields])

    assert packable(schema(("k", StringType()), ("n", LongType())))
    assert not packable(schema(("k", StringType(), False)))
    for other in (TimestampType(), DecimalType(10, 2), ArrayType(StringType())):
        assert not packable(schema(("k", StringType()), ("x", other)))
    for name in (PACKED_COUNT, "__pos"):
        assert not packable(schema((name, LongType())))


TEXT_COLUMNS = ["topic", "kind", "barrier_channels", "ack"]
OTHER_COLUMNS = [c for c in CONTROL_COLUMNS if c not in TEXT_COLUMNS]
OTHER_VALUES = [
    [1, 2, 3], [1, None, 3], [None, None], [2 ** 53 + 1, None], [2 ** 63, 1], [-2 ** 63, None],
    [True, None], [np.int64(4), None], [np.int32(4), 5], [1.5, None], [1, 2.5], [None], [7],
    [pd.Timestamp("2026-01-01"), None], [pd.Timestamp("2026-01-01", tz="UTC"), pd.NaT],
    [pd.Timestamp("2026-01-01", tz="Europe/Berlin"), None],
]
TEXT_VALUES = [["a", None], ["a", "b"], [None], [["a"], []], [["a", "b"], None]]


@pytest.mark.parametrize("name, values",
                         [(n, v) for n in OTHER_COLUMNS for v in OTHER_VALUES]
                         + [(n, v) for n in TEXT_COLUMNS for v in TEXT_VALUES], ids=repr)
def test_a_control_column_has_the_dtype_and_values_pandas_infers(name, values):
    """_control_array skips pandas' inference where it knows the answer; it must be the answer
    (PySpark converts the frame to Arrow by its dtypes)."""
    from barrier_ops.output_rows import _control_array

    made = pd.Series(_control_array(name, list(values)))
    expected = pd.Series(list(values))
    assert made.dtype == expected.dtype
    assert plain([made.tolist()]) == plain([expected.tolist()])


@pytest.mark.parametrize("seed", range(8))
def test_frames_keep_the_dtypes_pandas_infers_for_the_whole_columns(seed):
    """The frames are built from per-piece values; each column's dtype is the one pandas infers
    from all its values (the repeats add no value of a new type)."""
    out = random_rows(seed)
    frame = out.frame()
    for name in CONTROL_COLUMNS:
        whole = pd.Series(frame[name].astype(object).tolist())
        if name in TEXT_COLUMNS:
            assert frame[name].dtype == object
        elif len(frame):
            assert frame[name].dtype == whole.dtype, name
    packed = out.packed_frame(32)
    for name in CONTROL_COLUMNS:
        if len(frame):
            assert packed[name].dtype == frame[name].dtype, name
