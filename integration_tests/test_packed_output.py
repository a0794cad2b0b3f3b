"""Packed operator output (barrier_ops/packed_rows.py) on real Spark (local[2]): the operator's
output DataFrame has the same schema, rows, offsets and values whether its records crossed from
Python one row each or packed, for every packable type, nulls, NaN, numpy scalars and
DataFrame-returning functions; other schemas keep one row per output row."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

import barrier_ops.operator as operator_module
from barrier_ops.function import KeyedProcessFunction
from barrier_ops.operator import keyed_process, operator_output_schema
from barrier_ops.packed_rows import PACKED_ROW_RECORDS
from barrier_ops.testing import make_script, write_script
from integration_tests.operator_helpers import run_to_end, script_stream

SCHEMA = ("s string, b binary, flag boolean, tiny tinyint, small smallint, i int, n bigint, "
          "f float, d double")


class EveryType(KeyedProcessFunction):
    """Emits, per record, ``repeat`` rows of every packable type; some values are null, NaN or
    numpy scalars; for keys ``a``, ``c`` and ``e`` the rows come back as a pandas DataFrame, for
    the others as tuples (executor)."""

    def __init__(self, repeat: int) -> None:
        self.repeat = repeat

    def process_records(self, key, records, state):
        seen = state.value_state("seen", 0)
        rows = []
        for j in range(len(records) * self.repeat):
            i = seen.value() + j
            rows.append((None if i % 7 == 3 else f"{key!r}:{i}",
                         None if i % 5 == 1 else b"\x00" + bytes([i % 256]),
                         None if i % 6 == 2 else bool(i % 2), np.int8(i % 100),
                         None if i % 4 == 0 else i % 3000, np.int64(i) if i % 2 else i,
                         2 ** 53 + i, float("nan") if i % 9 == 4 else i / 4,
                         None if i % 8 == 5 else np.float64(i) / 3))
        seen.update(seen.value() + len(rows))
        if key in (b"a", b"c", b"e"):
            return pd.DataFrame(rows, columns=["s", "b", "flag", "tiny", "small", "i", "n", "f",
                                               "d"])
        return rows


def run(spark, script_path, work, name, fn, schema, monkeypatch, packed: bool):
    if not packed:  # the decision is the driver's, when the plan is built
        monkeypatch.setattr(operator_module, "packable", lambda user: False)
    out = keyed_process(script_stream(spark, script_path), "key", fn, schema,
                        operator_id="types", state_backend=f"file://{work}/state-{name}",
                        max_parallelism=4)
    plan_schema = out.schema
    try:
        table = run_to_end(out, name, work / f"chk-{name}")
    finally:
        monkeypatch.undo()
    return plan_schema, table.collect()


def comparable(rows):
    """Records sorted by (key group, offset) with NaN made comparable; control rows without the
    ack's timing metrics."""
    def value(v):
        return "NaN" if isinstance(v, float) and math.isnan(v) else v
    records = sorted((tuple(value(v) for v in r) for r in rows if r.kind == "record"),
                     key=lambda r: (r[-8], r[-7]))
    control = sorted((r.kind, r.checkpoint_id, r.topic, r.partition, r.offset,
                      tuple(r.barrier_channels), r.ack is None) for r in rows
                     if r.kind != "record")
    return records, control


def test_packed_output_equals_one_row_per_record(script_spark, tmp_path, monkeypatch):
    # repeat 40: a key's block spans several packed rows (PACKED_ROW_RECORDS records each)
    assert 40 > PACKED_ROW_RECORDS
    script = make_script(5, partitions=2, records=30, checkpoints=2, batches=3)
    path = write_script(script, str(tmp_path / "script.json"))
    fn = EveryType(repeat=40)
    schema_p, packed = run(script_spark, path, tmp_path, "packed", fn, SCHEMA, monkeypatch,
                           packed=True)
    schema_u, unpacked = run(script_spark, path, tmp_path, "unpacked", fn, SCHEMA, monkeypatch,
                             packed=False)
    assert schema_p == schema_u == operator_output_schema(
        script_spark.createDataFrame([], SCHEMA).schema)
    records_p, control_p = comparable(packed)
    records_u, control_u = comparable(unpacked)
    assert len(records_p) == 60 * 40
    assert records_p == records_u
    assert control_p == control_u and any(c[0] == "barrier" for c in control_p)
    offsets = {}
    for r in records_p:   # every key group's channel counts up from 0 without a gap
        offsets.setdefault(r[-8], []).append(r[-7])
    assert all(o == list(range(len(o))) for o in offsets.values())
    nulls = [r for r in packed if r.kind == "record" and r.s is None]
    assert nulls and any(r.f is None for r in packed if r.kind == "record")


class LatestPerKey(KeyedProcessFunction):
    """One row per key and call, as a per-key count emits them: many keys' single rows in one
    segment share a packed row, each with its own timestamp (the key's latest record's)."""

    def process_records(self, key, records, state):
        n = state.value_state("n", 0)
        n.update(n.value() + len(records))
        return [(str(key), n.value())]


def test_timestamps_of_packed_rows_equal_unpacked_ones_in_a_session_time_zone_with_dst(
        script_spark, tmp_path, monkeypatch):
    """Records stamped across New York's 2026 fall-back night, session time zone New York:
    the per-key rows' timestamps (and every other column) are the same packed and unpacked, and
    they are input records' timestamps. (The hour the clocks repeat, where PySpark picks standard
    time, is pinned by test_packed_rows.py against PySpark's own conversion.)"""
    import random

    script = make_script(11, partitions=2, records=80, checkpoints=2, batches=3,
                         keys="abcdefghijklmnopqrstuvwxyz")
    rng = random.Random(11)
    start_ms = 1793563200000  # 2026-10-31 20:00 UTC; New York repeats 01:00-02:00 on Nov 1
    for rec in script["records"]:
        rec["timestamp"] = start_ms + rng.randrange(18 * 3600 * 1000)
    path = write_script(script, str(tmp_path / "script.json"))
    before = script_spark.conf.get("spark.sql.session.timeZone")
    script_spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        _, packed = run(script_spark, path, tmp_path, "tz_packed", LatestPerKey(),
                        "s string, n bigint", monkeypatch, packed=True)
        _, unpacked = run(script_spark, path, tmp_path, "tz_unpacked", LatestPerKey(),
                          "s string, n bigint", monkeypatch, packed=False)
        records = script_stream(script_spark, path).filter("kind = 'record'")
        inputs = run_to_end(records.select("timestamp"), "tz_input",
                            tmp_path / "chk-tz-input").collect()
    finally:
        script_spark.conf.set("spark.sql.session.timeZone", before)
    records_p, control_p = comparable(packed)
    records_u, control_u = comparable(unpacked)
    assert records_p == records_u and control_p == control_u
    assert len(records_p) > 26
    stamps = {r.timestamp for r in packed if r.kind == "record"}
    assert None not in stamps and len(stamps) > 20
    assert stamps <= {r.timestamp for r in inputs}


def test_schemas_with_other_types_keep_one_row_per_output_row_and_exact_integers(
        script_spark, tmp_path, monkeypatch):
    """A timestamp user column is not packed (PySpark converts timestamps inside arrays
    differently); its rows still come out right, and a bigint above 2**53 stays exact although
    the control rows' nulls share its column (pandas made such a column float, and 2**53 + 1
    came out as 2**53)."""
    class Stamp(KeyedProcessFunction):
        def process_records(self, key, records, state):
            return [(str(key), records["timestamp"].iloc[i], 2 ** 53 + int(records["offset"].iloc[i]))
                    for i in range(len(records))]

    assert operator_module.packable(script_spark.createDataFrame([], "s string").schema)
    assert not operator_module.packable(
        script_spark.createDataFrame([], "s string, t timestamp").schema)
    assert not operator_module.packable(
        script_spark.createDataFrame([], "s string not null").schema)
    script = make_script(6, partitions=2, records=10, checkpoints=1, batches=2)
    path = write_script(script, str(tmp_path / "script.json"))
    _, rows = run(script_spark, path, tmp_path, "stamps", Stamp(),
                  "s string, t timestamp, n bigint", monkeypatch, packed=True)
    records = [r for r in rows if r.kind == "record"]
    assert len(records) == 20 and all(r.t is not None for r in records)
    assert sorted(r.n - 2 ** 53 for r in records) == sorted(
        r["offset"] for r in script["records"])


def test_a_query_started_unpacked_restarts_packed_from_its_checkpoint(script_spark, tmp_path,
                                                                     monkeypatch):
    """Upgrading to packed output keeps a running query's state: the stateful step's state and
    key are unchanged, only the rows it returns are packed. A running count over both runs
    (Spark's file sink, which restarts from its checkpoint) has every count of every key once."""
    from barrier_ops.examples.running_count import OUTPUT_SCHEMA_WITH_COUNT, RunningCount

    script = make_script(8, partitions=2, records=60, checkpoints=3, batches=4)
    path = write_script(script, str(tmp_path / "script.json"))
    release = tmp_path / "release"
    out_dir = tmp_path / "out"

    def run_until(batches: int, packed: bool) -> None:
        release.write_text(str(batches))
        if not packed:
            monkeypatch.setattr(operator_module, "packable", lambda user: False)
        df = (script_spark.readStream.format("barrier-ops-script").option("path", path)
              .option("release_path", str(release)).load())
        out = keyed_process(df, "key", RunningCount(with_count=True), OUTPUT_SCHEMA_WITH_COUNT,
                            operator_id="count", state_backend=f"file://{tmp_path}/state",
                            max_parallelism=4)
        q = (out.writeStream.format("parquet").option("path", str(out_dir))
             .option("checkpointLocation", str(tmp_path / "chk")).start())
        try:
            q.processAllAvailable()
        finally:
            q.stop()
            monkeypatch.undo()

    run_until(2, packed=False)
    first = script_spark.read.parquet(str(out_dir)).filter("kind = 'record'").count()
    run_until(4, packed=True)
    records = script_spark.read.parquet(str(out_dir)).filter("kind = 'record'").collect()
    assert 0 < first < len(records)
    counts = {}
    for r in records:
        counts.setdefault(r.key, []).append(r["count"])
    want = {}
    for r in script["records"]:
        want[r["key"]] = want.get(r["key"], 0) + 1
    assert {k: sorted(v) for k, v in counts.items()} == \
        {k: list(range(1, n + 1)) for k, n in want.items()}


def test_output_column_names_with_dots_spaces_and_backticks(script_spark, tmp_path, monkeypatch):
    """Output columns named with a dot, a space and a backtick: the operator unpacks its output
    with SQL text that quotes every name it did not make itself; the rows, packed and unpacked,
    are those of the same run with plain names. (Input columns with such names are PySpark's
    limit: ``applyInPandasWithState`` looks each input column up by its unquoted name.)"""
    script = make_script(8, partitions=2, records=20, checkpoints=2, batches=2)
    path = write_script(script, str(tmp_path / "script.json"))
    results = {}
    for name, schema, packings in (("plain", "s string, n bigint", (True,)),
                                   ("odd", "`user.name` string, `n``th value` bigint",
                                    (True, False))):
        for packed in packings:
            if not packed:
                monkeypatch.setattr(operator_module, "packable", lambda user: False)
            out = keyed_process(script_stream(script_spark, path), "key", LatestPerKey(), schema,
                                operator_id="names",
                                state_backend=f"file://{tmp_path}/state-{name}-{packed}",
                                max_parallelism=4)
            try:
                rows = run_to_end(out, f"names_{name}_{packed}",
                                  tmp_path / f"chk-{name}-{packed}").collect()
            finally:
                monkeypatch.undo()
            results[name, packed] = (out.columns[:2], comparable(rows))
    assert results["odd", True][0] == results["odd", False][0] == ["user.name", "n`th value"]
    plain = results["plain", True][1]
    assert len(plain[0]) > 8 and any(c[0] == "barrier" for c in plain[1])
    assert results["odd", True][1] == results["odd", False][1] == plain
