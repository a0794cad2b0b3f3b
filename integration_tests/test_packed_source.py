"""The source packing its records per key group of the keyed operator (``packedKeyGroups``) on
real Spark (local[2]) and a real broker: the function sees exactly the records, columns and types
it sees without packing, in pandas and in Arrow, headers, null keys and the session's time zone
included; fewer rows cross from the source; a stream packed for another operator is refused with
the fix named (issue 15). The random-kill test (test_exactly_once_random_kills.py) runs every
other pipeline run packed against the same checkpoint."""

from __future__ import annotations

import json
import time

import pytest
from kafka import KafkaProducer

from barrier_core.exceptions import InvalidOptionError
from barrier_ops import passthrough
from barrier_ops.function import KeyedProcessFunction
from barrier_ops.operator import keyed_process

MAXP = 4
RECORDS = 90
KEYS = [b"a", b"b", None, b"dd", b"e", b"ff", b"g"]


def _plain(value):
    """A record value as JSON-able text, whatever container PySpark handed it in."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "asDict"):
        return _plain(value.asDict())
    if hasattr(value, "tolist") and not isinstance(value, (int, float)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:
        return "nan"
    return value


class Describe(KeyedProcessFunction):
    """Reports every record it gets and the types it gets them in, one row per call (executor)."""

    def process_records(self, key, records, state):
        if hasattr(records, "to_pylist"):   # records_format="arrow"
            rows, types = records.to_pylist(), str(records.schema)
        else:
            rows = records.to_dict("records")
            types = json.dumps({c: str(t) for c, t in records.dtypes.items()})
        seen = [json.dumps({c: _plain(v) for c, v in r.items()}, sort_keys=True) for r in rows]
        return [(json.dumps(_plain(key)), types, s) for s in seen]


def _produce(bootstrap: str, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    start_ms = int(time.time() * 1000) - 3_600_000   # within the topic's retention
    for i in range(RECORDS):
        headers = [("h", b"x%d" % i), ("empty", b"")] if i % 3 == 0 else None
        producer.send(topic, key=KEYS[i % len(KEYS)], value=b"v%d" % i, partition=i % 2,
                      timestamp_ms=start_ms + 997 * i, headers=headers)
    producer.flush(timeout=60)
    producer.close()


def _source(spark, bootstrap, topic, tmp_path, packed: bool):
    reader = (spark.readStream.format("barrier-kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("includeHeaders", "true")
              .option("maxOffsetsPerTrigger", "40")
              .option("checkpoint.storage", str(tmp_path / "storage")))
    if packed:
        reader = reader.option("packedKeyGroups", str(MAXP))
    return reader.load()


def _seen(spark, bootstrap, topic, tmp_path, packed: bool, records_format: str):
    tag = f"{'packed' if packed else 'flat'}_{records_format}"
    out = keyed_process(_source(spark, bootstrap, topic, tmp_path / tag, packed), "key",
                        Describe(), "k string, types string, seen string", operator_id=tag,
                        state_backend=f"file://{tmp_path / tag}/state", max_parallelism=MAXP,
                        records_format=records_format)
    query = (out.writeStream.format("memory").queryName(tag).outputMode("append")
             .option("checkpointLocation", str(tmp_path / tag / "chk")).start())
    try:
        query.processAllAvailable()   # several batches (AvailableNow runs one on PySpark < 4.2)
        source_rows = sum(p["numInputRows"] for p in query.recentProgress)
    finally:
        query.stop()
    rows = [r for r in spark.table(tag).collect() if r.kind == "record"]
    return sorted((r.k, r.types, r.seen) for r in rows), source_rows


def _record_id(seen: str):
    record = json.loads(seen)
    return record["partition"], record["offset"]


@pytest.mark.parametrize("records_format", ["pandas", "arrow"])
def test_the_function_sees_the_same_records_packed(spark, bootstrap, topic_factory, tmp_path,
                                                   records_format):
    topic = topic_factory(2)
    _produce(bootstrap, topic)
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        flat, flat_rows = _seen(spark, bootstrap, topic, tmp_path, False, records_format)
        packed, packed_rows = _seen(spark, bootstrap, topic, tmp_path, True, records_format)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert len(flat) == RECORDS and len({s for _, _, s in flat}) == RECORDS
    expected = {_record_id(seen): (k, types, seen) for k, types, seen in flat}
    differ = [(got, expected.get(_record_id(got[2]))) for got in packed if got not in flat]
    assert not differ, json.dumps(differ[:2], indent=1)   # (packed, unpacked) of a record
    assert packed == flat
    # one row per key group and epoch of a fetch crossed, not one per record (plus barriers)
    assert packed_rows < flat_rows / 2


def test_a_stream_packed_for_another_operator_is_refused(spark, bootstrap, topic_factory,
                                                         tmp_path):
    df = _source(spark, bootstrap, topic_factory(1), tmp_path, packed=True)
    assert [f.name for f in df.schema.fields if f.name in ("offset", "__kg")] == ["offset",
                                                                                 "__kg"]
    with pytest.raises(InvalidOptionError, match="max_parallelism=8.*packedKeyGroups"):
        keyed_process(df, "key", Describe(), "k string, types string, seen string",
                      operator_id="x", state_backend=f"file://{tmp_path}/s", max_parallelism=8)
    with pytest.raises(InvalidOptionError, match="key_col='value'.*drop packedKeyGroups"):
        keyed_process(df, "value", Describe(), "k string, types string, seen string",
                      operator_id="x", state_backend=f"file://{tmp_path}/s",
                      max_parallelism=MAXP)
    with pytest.raises(InvalidOptionError, match="filter_records needs one row per record"):
        passthrough.filter_records(df, "value is not null")
