"""OutputRows.packed_frame: unpacked the way barrier_ops.packed_rows.unpack does it in the JVM,
it gives the rows of OutputRows.frame, in order, for any mix of record blocks and control rows
and any number of records a packed row may hold; blocks that continue one another (the records
of many keys in one epoch segment) share packed rows, each record keeping its own timestamp."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from barrier_ops.output_rows import CONTROL_COLUMNS, OutputRows
from barrier_ops.packed_rows import PACKED_COUNT, PACKED_TIMESTAMPS, utc_micros

COLUMNS = ["word", "count"]
PACKED_CONTROL = [c for c in CONTROL_COLUMNS if c != "timestamp"]


def random_rows(seed: int, tz=None) -> OutputRows:
    """Record blocks and control rows; a block often continues the one before it (same channel
    and epoch, next offset), as the blocks of the keys of one segment do."""
    rng = random.Random(seed)
    out = OutputRows(COLUMNS)
    nxt = None
    for _ in range(rng.randrange(0, 25)):
        if rng.random() < 0.75:
            rows = [(f"w{rng.randrange(9)}", rng.choice([1, 2 ** 53 + 1, None]))
                    for _ in range(rng.randrange(0, 40))]
            if nxt is not None and rng.random() < 0.7:
                partition, offset, epoch = nxt
            else:
                partition, offset, epoch = rng.randrange(2), rng.randrange(1000), rng.randrange(1, 3)
            ts = rng.choice([None, pd.Timestamp("2026-01-01") + pd.Timedelta(rng.randrange(10**9),
                                                                            unit="us")])
            if ts is not None and tz is not None:
                ts = ts.tz_localize(tz)
            out.add_records(rows, "op:c", partition, offset, ts, epoch)
            if rows:
                nxt = (partition, offset + len(rows), epoch)
        else:
            out.add_control(**rng.choice([
                dict(kind="ack", checkpoint_id=3, topic="t", partition=None, ack='{"a": 1}'),
                dict(kind="barrier", checkpoint_id=4, topic="op:c", partition=2, offset=7,
                     checkpoint_timestamp=99, barrier_channels=["op:c:0"])]))
            nxt = None
    return out


def unpacked(packed: pd.DataFrame) -> list:
    """``explode(sequence(0, __n - 1))``, ``get(c, pos)`` and the timestamp from
    ``get(__ts, pos)`` (UTC microseconds), row by row."""
    rows = []
    for row in packed.to_dict("records"):
        for pos in range(row[PACKED_COUNT]):
            rows.append([None if row[c] is None else row[c][pos] for c in COLUMNS]
                        + [row[PACKED_TIMESTAMPS][pos] if c == "timestamp" else
                           row[c] + pos if c == "offset" and not pd.isna(row[c]) else row[c]
                           for c in CONTROL_COLUMNS])
    return rows


def expected(out: OutputRows, tz=None) -> list:
    """``out.frame()`` row by row, its timestamps as PySpark stores them (UTC microseconds)."""
    frame = out.frame()
    micros = utc_micros(frame["timestamp"].tolist(), tz)
    rows = frame.astype(object).values.tolist()
    at = len(COLUMNS) + CONTROL_COLUMNS.index("timestamp")
    for row, m in zip(rows, micros):
        row[at] = m
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


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("max_records", [1, 3, 32])
@pytest.mark.parametrize("tz", [None, "UTC"])
def test_packed_frame_unpacks_to_the_rows_of_frame(seed, max_records, tz):
    out = random_rows(seed, tz)
    packed = out.packed_frame(max_records, "America/New_York")
    assert list(packed.columns) == COLUMNS + PACKED_CONTROL + [PACKED_TIMESTAMPS, PACKED_COUNT]
    assert (packed[PACKED_COUNT] <= max_records).all() and (packed[PACKED_COUNT] >= 1).all()
    assert plain(unpacked(packed)) == plain(expected(out, "America/New_York"))


@pytest.mark.parametrize("seed", range(10))
def test_blocks_added_at_once_are_the_blocks_added_one_by_one(seed):
    """OutputRows.add_blocks (an epoch segment's keys in one call) gives the frame and the
    packed frame of add_records called once a block, between control rows and blocks that
    continue a segment, follow it with a gap, or start another channel or epoch."""
    rng = random.Random(seed)
    one_by_one, at_once = OutputRows(COLUMNS), OutputRows(COLUMNS)
    offset = 0
    for _ in range(rng.randrange(1, 12)):
        if rng.random() < 0.25:
            control = dict(kind="barrier", checkpoint_id=4, topic="op:c", partition=2,
                           offset=offset, checkpoint_timestamp=99, barrier_channels=["op:c:0"])
            one_by_one.add_control(**control)
            at_once.add_control(**control)
            continue
        counts = [rng.randrange(1, 4) for _ in range(rng.randrange(1, 30))]
        rows = [(f"w{rng.randrange(9)}", rng.choice([1, 2 ** 53 + 1, None]))
                for _ in range(sum(counts))]
        stamps = [rng.choice([None, 1767225600000000000 + rng.randrange(10 ** 12),
                              pd.Timestamp("2026-01-01") + pd.Timedelta(rng.randrange(99), "s")])
                  for _ in counts]
        partition, epoch = rng.choice([(1, 2), (1, 2), (0, 2), (1, 3)])
        offset += rng.choice([0, 0, 5])
        at_once.add_blocks(rows, counts, stamps, "op:c", partition, offset, epoch)
        at = 0
        for count, ts in zip(counts, stamps):
            one_by_one.add_records(rows[at:at + count], "op:c", partition, offset, ts, epoch)
            at, offset = at + count, offset + count
    pd.testing.assert_frame_equal(at_once.frame(), one_by_one.frame())
    for max_records in (1, 3, 32):
        pd.testing.assert_frame_equal(at_once.packed_frame(max_records, "UTC"),
                                      one_by_one.packed_frame(max_records, "UTC"))


def test_blocks_that_continue_one_another_share_packed_rows_with_their_own_timestamps():
    """One record per key, as a per-key count emits them: 70 keys of one segment take three
    packed rows, not seventy; a control row, another epoch or a gap in offsets starts anew."""
    out = OutputRows(COLUMNS)
    base = pd.Timestamp("2026-03-01 12:00:00")
    for i in range(70):
        out.add_records([(f"k{i}", i)], "op:c", 1, 100 + i, base + pd.Timedelta(i, unit="ms"), 2)
    out.add_control(kind="barrier", checkpoint_id=2, topic="op:c", partition=1, offset=170,
                    checkpoint_timestamp=5, barrier_channels=["op:c:1"])
    out.add_records([("a", 1)], "op:c", 1, 170, base, 3)
    out.add_records([("b", 1)], "op:c", 1, 171, None, 4)    # another epoch
    out.add_records([("c", 1)], "op:c", 1, 173, base, 4)    # a gap in offsets
    packed = out.packed_frame(32, "UTC")
    assert packed[PACKED_COUNT].tolist() == [32, 32, 6, 1, 1, 1, 1]
    assert packed["offset"].tolist() == [100, 132, 164, 170, 170, 171, 173]
    assert packed["checkpoint_id"].tolist() == [2, 2, 2, 2, 3, 4, 4]
    first_us = int(base.tz_localize("UTC").value // 1000)
    assert list(packed[PACKED_TIMESTAMPS].iloc[1]) == [first_us + 1000 * i for i in range(32, 64)]
    assert list(packed[PACKED_TIMESTAMPS].iloc[3]) == [None]
    assert list(packed[PACKED_TIMESTAMPS].iloc[5]) == [None]
    assert list(packed["word"].iloc[2]) == [f"k{i}" for i in range(64, 70)]
    assert packed["word"].iloc[3] is None
    assert packed[PACKED_COUNT].dtype == np.int32


def test_control_rows_alone_pack_one_row_each():
    out = OutputRows(COLUMNS)
    out.add_control(kind="ack", checkpoint_id=3, topic="t", partition=None, ack="{}")
    out.add_control(kind="ack", checkpoint_id=3, topic="t", partition=None, ack="{}")
    packed = out.packed_frame(32, "UTC")
    assert packed[PACKED_COUNT].tolist() == [1, 1]
    assert packed["offset"].tolist() == [None, None] and packed["word"].tolist() == [None, None]
    assert plain(unpacked(packed)) == plain(expected(out, "UTC"))


@pytest.mark.parametrize("tz", ["UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata",
                                None])
def test_timestamps_are_the_microseconds_pyspark_stores_for_the_column(tz):
    """utc_micros gives what PySpark's Arrow conversion stores for the same values in a
    ``timestamp`` column of an unpacked frame: naive values are wall time in the session zone,
    one in the hour a DST change repeats is standard time, a zoned value is its instant."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import _create_converter_from_pandas
    from pyspark.sql.types import TimestampType

    values = [pd.Timestamp("2026-01-01 00:00:00.000001"), None,
              pd.Timestamp("2026-11-01 01:30:00"),       # repeated in New York
              pd.Timestamp("2026-10-25 02:30:00"),       # repeated in Berlin
              pd.Timestamp("1969-12-31 23:59:59.999999"), pd.Timestamp("2026-07-01 12:00:00"),
              pd.Timestamp(-1500, unit="ns"), pd.Timestamp(1500, unit="ns")]   # Arrow truncates
    convert = _create_converter_from_pandas(TimestampType(), timezone=tz or "UTC")
    column = convert(pd.Series(values))
    stored = pa.Array.from_pandas(column, type=pa.timestamp("us", tz="UTC"), safe=False)
    assert utc_micros(values, tz or "UTC") == stored.cast(pa.int64()).to_pylist()
    zoned = [pd.Timestamp("2026-05-05 10:00", tz="Asia/Tokyo"), None,
             pd.Timestamp(-1500, unit="ns", tz="UTC")]
    assert utc_micros(zoned, tz) == [int(zoned[0].value // 1000), None, -1]
    assert utc_micros([None, None], tz) == [None, None] and utc_micros([], tz) == []


def test_a_timestamp_that_is_not_one_is_refused_by_name():
    with pytest.raises(TypeError, match="must be a pandas timestamp or None"):
        utc_micros([5.5, None], "UTC")


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_naive_nanoseconds_convert_as_the_naive_timestamps_they_stand_for(zone):
    """The operator passes a record block's timestamp as a naive one's nanoseconds (no
    ``pd.Timestamp`` a key); packed and unpacked output treat them as that timestamp."""
    stamps = [pd.Timestamp("2026-11-01 01:30:00.123456789"), None,
              pd.Timestamp("1969-12-31 23:59:59.9999995")]
    as_ints = [None if t is None else t.value for t in stamps]
    assert utc_micros(as_ints, zone) == utc_micros(stamps, zone)
    assert utc_micros([as_ints[0], stamps[2]], zone) == utc_micros([stamps[0], stamps[2]], zone)
    only_ints = [as_ints[0], as_ints[2], as_ints[2] + 1]   # converted as one array in UTC
    assert utc_micros(only_ints, zone) == utc_micros(
        [stamps[0], stamps[2], stamps[2] + pd.Timedelta(1, "ns")], zone)
    frames = []
    for values in (stamps, as_ints):
        out = OutputRows(COLUMNS)
        for i, ts in enumerate(values):
            out.add_records([("w", i)], "op:c", 0, i, ts, 1)
        frames.append(out.frame())
    pd.testing.assert_frame_equal(frames[0], frames[1])
    assert str(frames[1]["timestamp"].dtype) == "datetime64[ns]"


@pytest.mark.parametrize("seed", range(12))
def test_a_timestamp_column_of_nanoseconds_is_the_column_of_their_timestamps(seed):
    """The frame's ``timestamp`` column made from ints (and None) at once is the column pandas
    infers from their ``pd.Timestamp``s: same dtype, same values, NaT for None."""
    from barrier_ops.output_rows import _control_array
    from barrier_ops.packed_rows import naive_timestamps

    rng = random.Random(seed)
    nat = int(np.iinfo(np.int64).min)
    for _ in range(40):
        values = [rng.choice([None, nat, rng.randrange(-2 ** 63 + 1, 2 ** 63)])
                  if rng.random() < 0.3 else rng.randrange(-2 ** 62, 2 ** 62)
                  for _ in range(rng.randrange(1, 12))]
        expected = _control_array("timestamp",
                                  [pd.Timestamp(v) if type(v) is int else v for v in values])
        converted = naive_timestamps(values)
        if isinstance(converted, list):   # nothing but None and NaT: one at a time
            assert all(v is None or v == nat for v in values)
        made = _control_array("timestamp", converted)
        assert type(made) is type(expected) and made.dtype == expected.dtype
        pd.testing.assert_series_equal(pd.Series(made), pd.Series(expected))
    mixed = [1, pd.Timestamp(2)]   # not all ints: one at a time, as before
    assert naive_timestamps(mixed) == [pd.Timestamp(1), pd.Timestamp(2)]
    assert naive_timestamps([]) == []


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
    for name in (PACKED_COUNT, PACKED_TIMESTAMPS, "__pos"):
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
    for name in PACKED_CONTROL:   # timestamps cross as arrays of UTC microseconds
        if len(frame):
            assert packed[name].dtype == frame[name].dtype, name


class _Conf:
    def __init__(self, values, refused=()):
        self.values, self.refused = values, refused

    def get(self, key, default=None):
        if key in self.refused:
            raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] {key}")
        return self.values.get(key, default)


class _Frame:
    def __init__(self, conf):
        self.sparkSession = type("Session", (), {"conf": conf})()


@pytest.mark.parametrize("values, refused, zone", [
    ({"spark.sql.session.timeZone": "Asia/Tokyo"}, (), "Asia/Tokyo"),
    ({"spark.sql.session.timeZone": "Asia/Tokyo",
      "spark.sql.execution.pandas.respectSessionTimeZone": "false"}, (), None),
    ({"spark.sql.session.timeZone": "Asia/Tokyo"},
     ("spark.sql.execution.pandas.respectSessionTimeZone",), "Asia/Tokyo"),
])
def test_packing_converts_in_the_zone_pyspark_gives_naive_timestamps(values, refused, zone):
    """The session's zone; the worker's local one (None) where the legacy option says not to
    respect it; the session's where the runtime refuses to say (driver)."""
    from barrier_ops.operator import _pandas_time_zone

    assert _pandas_time_zone(_Frame(_Conf(values, refused))) == zone
