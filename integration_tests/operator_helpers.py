"""Helpers for the keyed-operator integration tests (test driver process)."""

from __future__ import annotations


def script_stream(spark, script_path: str):
    """The scripted barrier source (``barrier-ops-script``, registered by the ``script_spark``
    fixture) replaying the script at ``script_path``."""
    return spark.readStream.format("barrier-ops-script").option("path", script_path).load()


def run_to_end(out, name: str, checkpoint_dir: str):
    """Run the streaming DataFrame ``out`` into the memory table ``name`` (append mode) until
    every available input is processed, stop it, and return the table as a DataFrame."""
    query = (out.writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(checkpoint_dir)).outputMode("append").start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return out.sparkSession.sql(f"select * from {name}")


def final_counts(rows) -> dict:
    """The last count of each word among a counting operator's output ``rows``."""
    final = {}
    for r in rows:
        if r.kind == "record":
            final[r.word] = max(final.get(r.word, 0), r["count"])
    return final


def assert_counted_like_the_script(rows, script: dict, backend, operator_id: str,
                                   max_parallelism: int, checkpoints: int = 3) -> None:
    """A counting operator's output ``rows`` over ``script``: exact final counts, each
    checkpoint's snapshots holding the counts at its cut, every key group acknowledging every
    checkpoint, and every key group's output channel gap-free from offset 0."""
    from barrier_ops.testing import reference_counts, snapshot_values

    assert final_counts(rows) == dict(reference_counts(script))
    for n in range(1, checkpoints + 1):
        assert snapshot_values(backend, n, operator_id, max_parallelism) == \
            reference_counts(script, n)
    acks = sorted((r.partition, r.checkpoint_id) for r in rows if r.kind == "ack")
    assert acks == [(kg, n) for kg in range(max_parallelism)
                    for n in range(1, checkpoints + 1)]
    for kg in range(max_parallelism):
        offsets = sorted(r.offset for r in rows if r.kind == "record" and r.partition == kg)
        assert offsets == list(range(len(offsets)))
