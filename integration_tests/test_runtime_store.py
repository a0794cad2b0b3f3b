"""``keyed_process(..., runtime_store="backend")`` on real Spark (local[2]): the operator runs on
stateless ``applyInPandas``, each group's runtime kept in the state backend between micro-batches
(:mod:`barrier_ops.batch_runtimes`), and its counts, snapshots, acknowledgements and output
channels are those of the default ``"spark"`` store, with no Spark state at all (issue 15)."""

from __future__ import annotations

import pytest

from barrier_kafka.spark_settings import STATELESS_AQE
from barrier_ops.examples.word_count import OUTPUT_SCHEMA, CountPerKey
from barrier_ops.operator import keyed_process
from barrier_ops.testing import make_script, reference_counts, write_script
from integration_tests.operator_helpers import (assert_counted_like_the_script, final_counts,
                                                script_stream)
from kafka_harness.spark import sql_conf
from state_backends.filesystem import FilesystemStateBackend

MAXP = 8


@pytest.mark.parametrize("parallelism", [None, 2])
def test_runtimes_in_the_backend_count_exactly_without_spark_state(script_spark, tmp_path,
                                                                  parallelism):
    # barriers of one checkpoint land in different batches per channel: records are held
    # back across batches, so every batch depends on the runtime the previous one stored
    script = make_script(13, partitions=2, records=60, checkpoints=3, batches=5,
                         keys="abcdefghijklmnop")
    path = write_script(script, str(tmp_path / "script.json"))
    name = f"runtimes_{parallelism or 'kg'}"
    out = keyed_process(script_stream(script_spark, path), "key", CountPerKey(), OUTPUT_SCHEMA,
                        operator_id="counted", state_backend=f"file://{tmp_path}/state",
                        max_parallelism=MAXP, parallelism=parallelism, runtime_store="backend")
    query = (out.writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "chk")).outputMode("append").start())
    try:
        query.processAllAvailable()
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        query_id = query.id
    finally:
        query.stop()
    assert len(progress) == 5 and not any(p["stateOperators"] for p in progress)
    rows = script_spark.sql(f"select * from {name}").collect()
    backend = FilesystemStateBackend(str(tmp_path / "state"))
    assert_counted_like_the_script(rows, script, backend, "counted", MAXP)
    # the runtimes: under the query's id, at most two a group, the newest from the last batch
    layout = "kg" if parallelism is None else f"ranges-{parallelism}"
    stored = backend.list(f"runtime/op-counted/{query_id}/{layout}")
    groups = {}
    for path in stored:
        group, batch = path.split("/")[-2:]
        groups.setdefault(int(group), []).append(int(batch))
    assert sorted(groups) == list(range(MAXP if parallelism is None else parallelism))
    assert all(len(b) <= 2 for b in groups.values()) and max(map(max, groups.values())) == 4
    assert backend.list("runtime") == stored


def test_runtimes_on_s3_count_exactly(script_spark, tmp_path, s3_server, s3_bucket):
    """The same on the S3 server: each range's runtime a PUT a batch, the older ones deleted."""
    from state_backends.registry import backend_from_uri

    s3 = {"s3.endpoint": s3_server.endpoint_url, "s3.access.key": s3_server.access_key,
          "s3.secret.key": s3_server.secret_key, "s3.region": s3_server.region}
    script = make_script(17, partitions=2, records=40, checkpoints=2, batches=4,
                         keys="abcdefghij")
    path = write_script(script, str(tmp_path / "script.json"))
    out = keyed_process(script_stream(script_spark, path), "key", CountPerKey(), OUTPUT_SCHEMA,
                        operator_id="counted", state_backend=f"s3://{s3_bucket}/state",
                        state_backend_options=s3, max_parallelism=MAXP, parallelism=2,
                        runtime_store="backend")
    query = (out.writeStream.format("memory").queryName("runtimes_s3")
             .option("checkpointLocation", str(tmp_path / "chk")).outputMode("append").start())
    try:
        query.processAllAvailable()
        query_id = query.id
    finally:
        query.stop()
    rows = script_spark.sql("select * from runtimes_s3").collect()
    assert final_counts(rows) == dict(reference_counts(script))
    backend = backend_from_uri(f"s3://{s3_bucket}/state", s3)
    kept = {}
    for p in backend.list("runtime"):
        assert p.startswith(f"runtime/op-counted/{query_id}/ranges-2/")
        group, batch = p.split("/")[-2:]
        kept.setdefault(int(group), []).append(int(batch))
    assert sorted(kept) == [0, 1] and all(len(b) <= 2 for b in kept.values())
    assert max(map(max, kept.values())) == 3


def _two_runs(script_spark, tmp_path, first_store: str):
    """A query over a script's first two batches with ``first_store``, then the same
    checkpointLocation with ``runtime_store="backend"`` over the rest; the second run's error
    (None: it ran through)."""
    script = make_script(19, partitions=2, records=40, checkpoints=2, batches=4,
                         keys="abcdefghij")
    path = write_script(script, str(tmp_path / "script.json"))
    release = tmp_path / "release"
    release.write_text("2")

    def start(store):
        src = (script_spark.readStream.format("barrier-ops-script").option("path", path)
               .option("release_path", str(release)).load())
        out = keyed_process(src, "key", CountPerKey(), OUTPUT_SCHEMA, operator_id="counted",
                            state_backend=f"file://{tmp_path}/state", max_parallelism=MAXP,
                            runtime_store=store)
        return (out.writeStream.format("noop")   # restartable, where the memory sink is not
                .option("checkpointLocation", str(tmp_path / "chk")).outputMode("append")
                .start())

    first = start(first_store)
    try:
        first.processAllAvailable()
        assert [p["batchId"] for p in first.recentProgress if p["numInputRows"]] == [0, 1]
    finally:
        first.stop()
    release.write_text("4")
    second = start("backend")
    try:
        second.processAllAvailable()
        return None
    except Exception as exc:  # noqa: BLE001 - the caller judges the error
        return str(exc)
    finally:
        second.stop()


def test_a_query_cannot_move_from_sparks_store_to_the_backend(script_spark, tmp_path):
    """Two batches with runtime_store='spark', then 'backend' on the same checkpointLocation:
    the next batch fails (Spark refuses a stateful operator gone from the plan) instead of
    starting every key group empty."""
    error = _two_runs(script_spark, tmp_path, "spark")
    assert error is not None and "STREAMING_STATEFUL_OPERATOR_NOT_MATCH" in error, error


class CountWithTags(CountPerKey):
    """The word count plus a map column: output PySpark cannot pack, so every call returns one
    row per output row, and a call without any (only control rows) returns an empty frame."""

    def process_records(self, key, records, state):
        return [(word, count, {"seen": count}) for word, count
                in super().process_records(key, records, state)]


def test_unpacked_output_and_calls_without_rows(script_spark, tmp_path):
    script = make_script(23, partitions=2, records=30, checkpoints=2, batches=4, keys="abc")
    path = write_script(script, str(tmp_path / "script.json"))
    out = keyed_process(script_stream(script_spark, path), "key", CountWithTags(),
                        "word string, count long, tags map<string,bigint>",
                        operator_id="tagged", state_backend=f"file://{tmp_path}/state",
                        max_parallelism=MAXP, runtime_store="backend")
    query = (out.writeStream.format("memory").queryName("runtimes_tagged")
             .option("checkpointLocation", str(tmp_path / "chk")).outputMode("append").start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = script_spark.sql("select * from runtimes_tagged").collect()
    assert final_counts(rows) == dict(reference_counts(script))
    assert all(r.tags == {"seen": r["count"]} for r in rows if r.kind == "record")


@pytest.mark.parametrize("stateless_aqe", ["recommended", "on"])
def test_a_batch_is_one_spark_job_with_the_recommended_settings(script_spark, tmp_path,
                                                              stateless_aqe):
    """The operator on stateless ``applyInPandas`` shuffles its input. Spark 4.1+ runs a
    stateless stream's shuffle adaptively: the shuffle's map stage as a job of its own, then the
    rest of the batch re-planned and run as a second job, about 60 ms a batch on 2 cores
    (docs/operations.md, "Adaptive execution of stateless streams"). The session the suite
    builds has the library's recommended settings, which turn that off: each batch with input
    is one job. A session that turns it back on for the query counts the same."""
    script = make_script(29, partitions=2, records=40, checkpoints=2, batches=4, keys="abcdefg")
    path = write_script(script, str(tmp_path / "script.json"))
    out = keyed_process(script_stream(script_spark, path), "key", CountPerKey(), OUTPUT_SCHEMA,
                        operator_id="counted", state_backend=f"file://{tmp_path}/state",
                        max_parallelism=MAXP, parallelism=2, runtime_store="backend")
    writer = (out.writeStream.format("memory").queryName(f"runtimes_aqe_{stateless_aqe}")
              .option("checkpointLocation", str(tmp_path / "chk")).outputMode("append"))
    if stateless_aqe == "on":   # the query copies the session's SQL settings at start()
        with sql_conf(script_spark, STATELESS_AQE, "true"):
            query = writer.start()
    else:
        query = writer.start()
    try:
        query.processAllAvailable()
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        jobs = script_spark.sparkContext.statusTracker().getJobIdsForGroup(str(query.runId))
    finally:
        query.stop()
    rows = script_spark.sql(f"select * from runtimes_aqe_{stateless_aqe}").collect()
    assert final_counts(rows) == dict(reference_counts(script))
    assert len(batches) == 4
    if stateless_aqe == "recommended":
        assert len(jobs) == len(batches), f"{len(jobs)} Spark jobs for {len(batches)} batches"
    else:
        assert len(jobs) >= len(batches)
