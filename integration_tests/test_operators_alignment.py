"""keyed_process on real Spark (local[2]) over the scripted barrier source: aligned snapshots vs a
reference computed from the rows, at-least-once mode, and restore into a query with a different
number of shuffle partitions."""

from __future__ import annotations

import json
import shutil

import pytest

from barrier_ops.examples.word_count import keyed_count
from barrier_ops.testing import make_script, reference_counts, snapshot_values, write_script
from integration_tests.operator_helpers import run_to_end, script_stream
from state_backends.filesystem import FilesystemStateBackend

MAXP = 8


def run_query(spark, script_path, state_dir, chk_dir, name, **kwargs):
    out = keyed_count(script_stream(spark, script_path), "key", f"file://{state_dir}",
                      max_parallelism=MAXP, **kwargs)
    return run_to_end(out, name, chk_dir).toPandas()


def test_aligned_count_matches_reference(script_spark, tmp_path):
    # barriers of one checkpoint fall in different micro-batches per channel; rows shuffled
    script = make_script(11, partitions=2, records=40, checkpoints=3, batches=4)
    path = write_script(script, str(tmp_path / "script.json"))
    out = run_query(script_spark, path, tmp_path / "state", tmp_path / "chk", "op_aligned")
    backend = FilesystemStateBackend(str(tmp_path / "state"))
    for n in (1, 2, 3):
        assert snapshot_values(backend, n, "keyed-count", MAXP) == reference_counts(script, n)
    acks = [json.loads(a) for a in out[out.kind == "ack"].ack]
    assert sorted((a["checkpoint_id"], a["key_group"]) for a in acks) == \
        sorted((n, kg) for n in (1, 2, 3) for kg in range(MAXP))
    assert all(a["offsets"] == {"t": {str(p): o for p, o in
                                      ((int(c.split(":")[1]), o) for c, o in
                                       script["cuts"][a["checkpoint_id"]].items())}}
               for a in acks)
    assert any(a["metrics"]["held_back_records"] > 0 for a in acks)
    assert all(a["num_key_groups"] == MAXP and a["metrics"]["state_bytes"] > 0 for a in acks)
    recs = out[out.kind == "record"]
    for row in recs.itertuples():
        lo = reference_counts(script, row.checkpoint_id - 1)[row.word]
        hi = reference_counts(script, row.checkpoint_id)[row.word]
        assert lo < row.count <= hi, row
    assert recs.groupby("word")["count"].max().to_dict() == dict(reference_counts(script))
    barriers = out[out.kind == "barrier"]
    assert len(barriers) == 3 * MAXP and set(barriers.topic) == {"op:keyed-count"}
    # What the sink gets: barrier_channels empty on every other row, never null (a list column
    # null on most rows costs Spark's JVM several times more per row when it hands rows to Python)
    others = out[out.kind != "barrier"].barrier_channels
    assert len(others) and all(c is not None and len(c) == 0 for c in others)


def test_restore_into_different_shuffle_partitions(script_spark, tmp_path):
    script = make_script(5, partitions=2, records=40, checkpoints=3, batches=4)
    path = write_script(script, str(tmp_path / "script.json"))
    run_query(script_spark, path, tmp_path / "a", tmp_path / "chk-a", "op_restore_a")
    a = FilesystemStateBackend(str(tmp_path / "a"))
    # job B: a new query restored from checkpoint 1, fed what follows the cut (as the source
    # does when it starts from checkpoint 1's offsets), other batching, other parallelism
    after = [[r for r in batch if r["checkpoint_id"] > 1] for batch in script["batches"]]
    tail = write_script({"batches": [after[0] + after[1], after[2] + after[3]]},
                        str(tmp_path / "tail.json"))
    shutil.copytree(tmp_path / "a" / "chk-1", tmp_path / "b" / "chk-1")
    old = script_spark.conf.get("spark.sql.shuffle.partitions")
    script_spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        out = run_query(script_spark, tail, tmp_path / "b", tmp_path / "chk-b", "op_restore_b",
                        restore_from=1, restore_requires_complete=False)
    finally:
        script_spark.conf.set("spark.sql.shuffle.partitions", old)
    b = FilesystemStateBackend(str(tmp_path / "b"))
    for n in (2, 3):
        assert snapshot_values(b, n, "keyed-count", MAXP) == \
            snapshot_values(a, n, "keyed-count", MAXP) == reference_counts(script, n)
    recs = out[out.kind == "record"]
    assert recs.groupby("word")["count"].max().to_dict() == dict(reference_counts(script))
    assert recs.checkpoint_id.min() >= 2


def test_at_least_once_snapshots_contain_the_cut(script_spark, tmp_path):
    script = make_script(11, partitions=2, records=40, checkpoints=3, batches=4)
    path = write_script(script, str(tmp_path / "script.json"))
    out = run_query(script_spark, path, tmp_path / "state", tmp_path / "chk", "op_alo",
                    mode="at_least_once")
    backend = FilesystemStateBackend(str(tmp_path / "state"))
    for n in (1, 2, 3):
        snap, ref = snapshot_values(backend, n, "keyed-count", MAXP), reference_counts(script, n)
        assert all(snap[k] >= v for k, v in ref.items()), n
    acks = [json.loads(a) for a in out[out.kind == "ack"].ack]
    assert len(acks) == 3 * MAXP and all(a["metrics"]["held_back_records"] == 0 for a in acks)


def test_missing_key_column_lists_the_columns_the_input_has(spark, tmp_path):
    """Issue 14: a wrong key_col must name the input's columns, before anything runs."""
    from barrier_ops.examples.running_count import OUTPUT_SCHEMA, RunningCount
    from barrier_ops.operator import keyed_process
    from barrier_ops.exceptions import InvalidOptionError
    from barrier_core.schema import source_schema

    df = spark.createDataFrame([], source_schema())
    with pytest.raises(InvalidOptionError) as err:
        keyed_process(df, "user_id", RunningCount(), OUTPUT_SCHEMA, operator_id="op",
                      state_backend=str(tmp_path / "s"))
    message = str(err.value)
    assert "['user_id']" in message and "'key'" in message and "'value'" in message
    assert "key_col='user_id'" in message


def test_the_stateful_step_gets_no_list_column(script_spark, tmp_path):
    """PySpark 4.3 sizes the Arrow batch it builds for ``applyInPandasWithState`` after every row,
    and Arrow's ``ListVector`` makes that walk back to the last non-null value: for
    ``barrier_channels``, null on every record, a cost quadratic in the rows per Arrow batch
    (21 of 85 executor-thread JVM samples in a profile of bench_pipeline). The operator
    sends it as JSON text; the aligned count above still reads every barrier's channels."""
    from pyspark.sql.types import ArrayType, StringType

    from barrier_ops.operator import with_key_groups

    path = write_script(make_script(3), str(tmp_path / "script.json"))
    df = script_stream(script_spark, path)
    assert isinstance(df.schema["barrier_channels"].dataType, ArrayType)
    keyed = with_key_groups(df, "key", MAXP)
    assert [f.name for f in keyed.schema.fields if isinstance(f.dataType, ArrayType)] == []
    assert keyed.schema["barrier_channels"].dataType == StringType()
