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
