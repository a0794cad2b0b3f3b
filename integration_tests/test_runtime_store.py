"""``keyed_process(..., runtime_store="backend")`` on real Spark (local[2]): the operator runs on
stateless ``applyInPandas``, each group's runtime kept in the state backend between micro-batches
(:mod:`barrier_ops.batch_runtimes`), and its counts, snapshots, acknowledgements and output
channels are those of the default ``"spark"`` store, with no Spark state at all (issue 15)."""

from __future__ import annotations

import pytest

from barrier_ops.examples.word_count import OUTPUT_SCHEMA, CountPerKey
from barrier_ops.operator import keyed_process
from barrier_ops.testing import make_script, reference_counts, snapshot_values, write_script
from integration_tests.operator_helpers import script_stream
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
    final = {}
    for r in rows:
        if r.kind == "record":
            final[r.word] = max(final.get(r.word, 0), r["count"])
    assert final == dict(reference_counts(script))
    backend = FilesystemStateBackend(str(tmp_path / "state"))
    for n in (1, 2, 3):
        assert snapshot_values(backend, n, "counted", MAXP) == reference_counts(script, n)
    acks = sorted((r.partition, r.checkpoint_id) for r in rows if r.kind == "ack")
    assert acks == [(kg, n) for kg in range(MAXP) for n in (1, 2, 3)]
    for kg in range(MAXP):
        offsets = sorted(r.offset for r in rows if r.kind == "record" and r.partition == kg)
        assert offsets == list(range(len(offsets)))
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
