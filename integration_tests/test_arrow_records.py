"""``keyed_process(..., records_format="arrow")`` on real Spark (local[2]): the function gets each
key's records as a pyarrow RecordBatch with the column types of the pandas frame, and the counts
and checkpoint snapshots are exact."""

from __future__ import annotations

from barrier_ops.function import KeyedProcessFunction
from barrier_ops.operator import keyed_process
from barrier_ops.testing import make_script, reference_counts, snapshot_values, write_script
from integration_tests.operator_helpers import run_to_end, script_stream
from state_backends.filesystem import FilesystemStateBackend

MAXP = 4


class CountArrow(KeyedProcessFunction):
    """A running count per key that reports what ``records`` was (executor)."""

    def process_records(self, key, records, state):
        n = state.value_state("count", 0)
        n.update(n.value() + len(records))
        offsets = records.column("offset").to_pylist()
        partitions = records.column("partition").to_pylist()
        by_partition = {}
        for p, o in zip(partitions, offsets):
            by_partition.setdefault(p, []).append(o)
        in_order = all(o == sorted(o) for o in by_partition.values())
        kinds = set(records.column("kind").to_pylist())
        return [(key.decode(), n.value(), type(records).__name__,
                 f"{records.schema.field('key').type}/{records.schema.field('partition').type}/"
                 f"{records.schema.field('timestamp').type}", in_order and kinds == {"record"})]


def test_each_key_gets_its_records_as_an_arrow_batch_and_counts_are_exact(script_spark, tmp_path):
    script = make_script(7, partitions=2, records=40, checkpoints=3, batches=4)
    path = write_script(script, str(tmp_path / "script.json"))
    out = keyed_process(script_stream(script_spark, path), "key", CountArrow(),
                        "word string, count long, seen string, types string, ordered boolean",
                        operator_id="keyed-count", state_backend=f"file://{tmp_path}/state",
                        max_parallelism=MAXP, records_format="arrow")
    rows = [r for r in run_to_end(out, "arrow_records", tmp_path / "chk").collect()
            if r.kind == "record"]
    assert rows and {r.seen for r in rows} == {"RecordBatch"}
    assert {r.types for r in rows} == {"binary/int32/timestamp[ns]"}
    assert all(r.ordered for r in rows)
    final = {}
    for r in rows:
        final[r.word] = max(final.get(r.word, 0), r["count"])
    assert final == dict(reference_counts(script))
    backend = FilesystemStateBackend(str(tmp_path / "state"))
    for n in (1, 2, 3):
        assert snapshot_values(backend, n, "keyed-count", MAXP) == reference_counts(script, n)
