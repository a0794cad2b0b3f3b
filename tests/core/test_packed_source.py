"""The packed source layout (``packedKeyGroups``, barrier_core.packed_source) without Spark:
packing keeps every record once, grouped by key group and epoch in Kafka order, with the key
group the keyed operator computes; unpacking gives back the rows; sinks refuse packed rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from barrier_core.exceptions import InvalidOptionError
from barrier_core.packed_source import (HEADER_COUNTS_COLUMN, KEY_GROUP_COLUMN, key_groups_of,
                                        pack, packed_key_groups, packed_schema, refuse_packed,
                                        unpack_frame, unpack_frames, unpacked_schema)
from barrier_core.schema import source_schema, spark_arrow_schema
from barrier_ops.keygroups import key_group_of

N = 5


def _records(keys, epochs, headers=None):
    """A source batch of records of channel t:0, offsets 100.. (as RowBuilder makes them)."""
    schema = spark_arrow_schema(source_schema(include_headers=headers is not None))
    n = len(keys)
    cols = {"key": pa.array(keys, pa.binary()), "value": pa.array([b"v%d" % i for i in range(n)]),
            "topic": pa.array(["t"] * n), "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(100, 100 + n), pa.int64()),
            "timestamp": pa.array([1_000_000 * i for i in range(n)], pa.int64()).cast(
                schema.field("timestamp").type),
            "timestampType": pa.array([0] * n, pa.int32()),
            "kind": pa.array(["record"] * n), "checkpoint_id": pa.array(epochs, pa.int64()),
            "checkpoint_timestamp": pa.nulls(n, pa.int64()),
            "barrier_channels": pa.array([[]] * n, schema.field("barrier_channels").type)}
    if headers is not None:
        cols["headers"] = pa.array(headers, schema.field("headers").type)
    return pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)


def _packed_arrow(include_headers=False):
    return spark_arrow_schema(packed_schema(source_schema(include_headers), N))


def test_key_groups_are_those_of_the_operator():
    keys = [b"a", b"bb", None, b"\x00\xff", "ü".encode()]
    assert key_groups_of(keys, N).tolist() == [key_group_of(k, N) for k in keys]


def test_records_are_packed_per_key_group_and_epoch_in_kafka_order():
    keys = [b"k%d" % (i % 7) for i in range(40)]
    epochs = [3] * 25 + [4] * 15
    packed = pack(_records(keys, epochs), _packed_arrow(), N).to_pylist()
    kgs = key_groups_of(keys, N)
    expected = {}
    for i, (kg, epoch) in enumerate(zip(kgs.tolist(), epochs)):
        expected.setdefault((kg, epoch), []).append(100 + i)
    assert [(r[KEY_GROUP_COLUMN], r["checkpoint_id"]) for r in packed] == sorted(expected)
    for r in packed:
        assert r["offset"] == expected[r[KEY_GROUP_COLUMN], r["checkpoint_id"]]
        assert r["key"] == [b"k%d" % ((o - 100) % 7) for o in r["offset"]]
        assert r["timestamp"] == [1_000_000 * (o - 100) for o in r["offset"]]   # micros
        assert (r["topic"], r["partition"], r["kind"]) == ("t", 0, "record")


def test_a_barrier_row_stays_one_row_with_no_key_group():
    schema = spark_arrow_schema(source_schema())
    row = {f.name: None for f in schema}
    row.update(topic="t", partition=0, offset=140, kind="barrier", checkpoint_id=4,
               checkpoint_timestamp=9, barrier_channels=["t:0", "t:1"])
    barrier = pa.RecordBatch.from_pylist([row], schema=schema)
    (packed,) = pack(barrier, _packed_arrow(), N).to_pylist()
    assert packed[KEY_GROUP_COLUMN] is None and packed["offset"] == [140]
    assert packed["kind"] == "barrier" and packed["barrier_channels"] == ["t:0", "t:1"]


def test_unpacking_gives_each_record_its_columns_and_headers_back():
    headers = [[("h", b"1")], None, [], [("a", b""), ("b", b"2")], None, [("z", b"9")]]
    batch = _records([b"x", b"y", b"x", None, b"y", b"x"], [1] * 6,
                     [None if h is None else [{"key": k, "value": v} for k, v in h]
                      for h in headers])
    packed = pack(batch, _packed_arrow(include_headers=True), N)
    assert HEADER_COUNTS_COLUMN in packed.schema.names and packed.num_rows < 6
    flat = unpack_frame(packed.to_pandas(), "UTC").sort_values("offset")
    assert flat["offset"].tolist() == list(range(100, 106))
    assert flat["key"].tolist() == [b"x", b"y", b"x", None, b"y", b"x"]
    assert [None if h is None else [(d["key"], d["value"]) for d in h]
            for h in flat["headers"]] == headers
    assert flat["timestamp"].tolist() == [pd.Timestamp(i, unit="s") for i in range(6)]
    assert HEADER_COUNTS_COLUMN not in flat.columns
    assert flat[KEY_GROUP_COLUMN].tolist() == key_groups_of(flat["key"].tolist(), N).tolist()


def test_a_calls_packed_frames_unpack_as_one_frame_in_key_group_order():
    """unpack_frames: the packed rows of every frame of the call, stably sorted by key group,
    unpack as one frame (the records a range sorts by key group anyway, already in that order):
    each key group's records in the order they had, nothing lost or repeated."""
    keys = [b"k%d" % (i % 11) for i in range(60)]
    packed = pack(_records(keys, [3] * 30 + [4] * 30), _packed_arrow(), N).to_pandas()
    shuffled = packed.take(np.random.default_rng(7).permutation(len(packed)))
    chunks = [shuffled.iloc[:4], shuffled.iloc[4:4], shuffled.iloc[4:]]
    (flat,) = unpack_frames(chunks, "UTC", KEY_GROUP_COLUMN)
    kgs = flat[KEY_GROUP_COLUMN].to_numpy()
    assert (kgs[1:] >= kgs[:-1]).all()
    assert sorted(flat["offset"].tolist()) == list(range(100, 160))
    one_by_one = pd.concat([unpack_frame(c, "UTC") for c in chunks if len(c)], ignore_index=True)
    for kg in range(N):   # each key group's records keep the order the frames gave them
        assert (flat.loc[flat[KEY_GROUP_COLUMN] == kg, "offset"].tolist()
                == one_by_one.loc[one_by_one[KEY_GROUP_COLUMN] == kg, "offset"].tolist())
    empty = packed.iloc[:0]
    (none,) = unpack_frames([empty], "UTC", KEY_GROUP_COLUMN)
    assert none is empty   # as unpack_frame gives an empty frame


def test_timestamps_unpack_to_the_session_time_zone_wall_time():
    packed = pack(_records([b"x"], [1]), _packed_arrow(), N)
    flat = unpack_frame(packed.to_pandas(), "America/New_York")
    assert flat["timestamp"].tolist() == [pd.Timestamp("1969-12-31 19:00:00")]


def test_schemas_round_trip_and_name_their_key_groups():
    flat = source_schema(include_headers=True)
    packed = packed_schema(flat, N)
    assert packed_key_groups(packed) == N and packed_key_groups(flat) is None
    back = unpacked_schema(packed)
    assert [f for f in back.fields if f.name != KEY_GROUP_COLUMN] == flat.fields


@pytest.mark.parametrize("step", ["The barrier-kafka sink", "The barrier-files sink"])
def test_sinks_refuse_packed_rows_and_name_the_fix(step):
    refuse_packed(source_schema(), step)   # one row per record: accepted
    with pytest.raises(InvalidOptionError, match=f"{step} needs one row per record.*"
                       "packedKeyGroups=5.*drop the packedKeyGroups option"):
        refuse_packed(packed_schema(source_schema(), N), step)


def test_the_kafka_sink_checks_its_input_schema():
    from barrier_sink.kafka_sink import validate_schema
    from barrier_sink.options import KafkaSinkOptions

    opts = KafkaSinkOptions.from_options({"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t",
                                         "checkpoint.storage": "/tmp/unused"})
    validate_schema(source_schema(), opts)
    with pytest.raises(InvalidOptionError, match="barrier-kafka sink needs one row per record"):
        validate_schema(packed_schema(source_schema(), N), opts)
    assert np.array_equal(key_groups_of([], N), np.array([], dtype=np.int32))
