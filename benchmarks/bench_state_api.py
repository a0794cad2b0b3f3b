"""Which of Spark's stateful Python APIs should carry the keyed operator (issue 15, operator goal)?

``keyed_process`` runs on ``applyInPandasWithState``: one call per key group and micro-batch,
the key group's runtime pickled into one state row. The issue asks whether
``transformWithStateInPandas`` (Spark 4.0+: state variables, TTL, timers; RocksDB state store
only) would be faster behind the same API. This benchmark runs the same keyed count each way,
side by side in one run, on the same generated input, so the state mechanism is the only
difference:

* ``groupBy().count()``: Spark's own aggregation (the peer), update mode;
* ``applyInPandas`` by key group with no state at all (each batch's counts only): the floor a
  stateful API adds to, the same Python calls and rows without a state store;
* ``applyInPandasWithState``, one call per key group (``--key-groups`` of them, assigned as
  ``keyed_process`` assigns them), the group's counts pickled into one binary state value (the
  operator's layout), on the default state store and on RocksDB;
* ``applyInPandas`` and ``applyInArrow`` by key group, each call keeping the group's pickled
  counts itself with the code ``keyed_process(..., runtime_store="backend")`` keeps its
  runtimes with (:mod:`barrier_ops.batch_runtimes`): a file per key group and micro-batch,
  fsynced, the newest of an earlier batch read back ("own state");
* ``transformWithStateInPandas`` by key group, the same pickled counts in one ``ValueState``;
* ``transformWithStateInPandas`` by key, one ``ValueState`` count per key (the layout the API is
  made for; one call per key and batch).

Each Python variant emits one row per key seen in the batch, as ``groupBy().count()`` does in
update mode. The input is Spark's ``rate-micro-batch`` source (``--records`` rows a batch,
``value % --keys`` as the key, 2 partitions), the output Spark's ``noop`` sink, so no Python
source or sink takes part. Variants alternate (A B C ... A B C) for ``--rounds`` rounds after a
warm-up; the table prints, per variant, the median micro-batch time (Spark's
``triggerExecution``) over the run's batches and its parts from the progress's
``stateOperators`` (per task: ``allUpdatesTimeMs``, the operator's run with its Python;
``commitTimeMs``, the state store's commit), and the ratio of batch times to
``groupBy().count()``. The session has :func:`barrier_kafka.recommended_spark_conf` (on Spark
4.1+ Python workers over Unix domain sockets); ``--conf KEY=VALUE`` sets any Spark setting.

    python benchmarks/bench_state_api.py [--records 10000] [--keys 997] [--batches 15] \
        [--key-groups 16] [--rounds 2] [--conf spark.python.unix.domain.socket.enabled=false] \
        [--variants "applyInPandasWithState, key groups;applyInPandas, key groups, own state"]

Runs on the driver (local Spark, ``local[2]``); no Kafka broker needed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_pipeline import state_store_ms  # noqa: E402
from benchmarks.bench_source import add_conf_argument, session_settings, session_conf  # noqa: E402

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
OUTPUT = "key long, count long"


def _counts_of(pdfs) -> "dict":
    """Records per key in one call's input frames (executor)."""
    import pandas as pd

    frames = list(pdfs)
    keys = pd.concat([f["key"] for f in frames], ignore_index=True) if frames else pd.Series([])
    return keys.value_counts().to_dict()


def _merged(blob, seen: dict):
    """The key group's counts (``blob``: pickled, or None for none yet) plus ``seen``, and their
    new pickled form (executor)."""
    import pickle

    counts = pickle.loads(blob) if blob is not None else {}
    for k, n in seen.items():
        counts[k] = counts.get(k, 0) + n
    return counts, pickle.dumps(counts, protocol=4)


def _with_key_groups(df, key_groups: int):
    """``df`` plus ``kg``, the key group of its ``key`` as ``keyed_process`` computes it."""
    from barrier_ops.keygroups import key_group_column

    return df.withColumn("kg", key_group_column("key", df.schema["key"].dataType, key_groups))


def _rows(seen: dict, counts: dict):
    import pandas as pd

    keys = list(seen)
    return pd.DataFrame({"key": keys, "count": [counts[k] for k in keys]}, dtype="int64")


def apply_in_pandas_with_state(df, key_groups: int, state_dir: str):
    """One call per key group; its counts pickled into one binary state value (executor)."""
    def per_group(key, pdfs, state):
        seen = _counts_of(pdfs)
        counts, blob = _merged(state.get[0] if state.exists else None, seen)
        state.update((blob,))
        yield _rows(seen, counts)

    return _with_key_groups(df, key_groups).groupBy("kg").applyInPandasWithState(
        per_group, OUTPUT, "blob binary", "update", "NoTimeout")


def apply_in_pandas_stateless(df, key_groups: int, state_dir: str):
    """The floor: the same calls and rows per key group through ``applyInPandas``, without any
    state (each batch's counts only; executor). What a key group costs before state."""
    def per_group(pdf):
        seen = _counts_of([pdf])
        return _rows(seen, seen)

    return _with_key_groups(df, key_groups).groupBy("kg").applyInPandas(per_group, OUTPUT)


def _batch_id() -> int:
    """The micro-batch this task belongs to: Spark sets it as a local property of every task of
    a streaming batch (executor)."""
    from pyspark import TaskContext

    return int(TaskContext.get().getLocalProperty("streaming.sql.batchId"))


def _own_state(kg, seen: dict, state_dir: str):
    """The key group's counts plus ``seen``, kept in ``state_dir`` as the keyed operator keeps
    its runtimes with ``runtime_store="backend"`` (:class:`~barrier_ops.batch_runtimes.
    BatchRuntimes` on a local-disk backend: a file per key group and micro-batch, the newest of
    an earlier batch read back; executor)."""
    from barrier_ops.batch_runtimes import BatchRuntimes
    from state_backends.filesystem import FilesystemStateBackend

    runtimes = BatchRuntimes(FilesystemStateBackend(state_dir), "bench", "query", "kg")
    batch, group = _batch_id(), int(kg)
    blob, stale = runtimes.load_before(group, batch)
    counts, blob = _merged(blob, seen)
    runtimes.save(group, batch, blob, stale)
    return counts


def apply_in_pandas_own_state(df, key_groups: int, state_dir: str):
    """``applyInPandas`` (no Spark state store) with each key group's counts kept by the call
    itself: pickled into a file per key group and micro-batch in ``state_dir``, fsynced, the
    one before this batch read back (executor). What the keyed operator would cost if its
    runtime lived in the state backend, versioned by batch, instead of ``GroupState``."""
    def per_group(pdf):
        seen = _counts_of([pdf])
        return _rows(seen, _own_state(pdf["kg"].iloc[0], seen, state_dir))

    return _with_key_groups(df, key_groups).groupBy("kg").applyInPandas(per_group, OUTPUT)


def apply_in_arrow_own_state(df, key_groups: int, state_dir: str):
    """As :func:`apply_in_pandas_own_state` through ``applyInArrow``: the key group's rows as a
    pyarrow Table, no pandas conversion (executor)."""
    def per_group(table):
        import pyarrow as pa
        import pyarrow.compute as pc

        vc = pc.value_counts(table.column("key"))
        seen = dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist()))
        counts = _own_state(table.column("kg")[0].as_py(), seen, state_dir)
        keys = list(seen)
        return pa.table({"key": pa.array(keys, pa.int64()),
                         "count": pa.array([counts[k] for k in keys], pa.int64())})

    return _with_key_groups(df, key_groups).groupBy("kg").applyInArrow(per_group, OUTPUT)


def _blob_processor():
    from pyspark.sql.streaming import StatefulProcessor

    class BlobCount(StatefulProcessor):
        """transformWithStateInPandas by key group: the counts pickled into one ValueState."""

        def init(self, handle):
            self.blob = handle.getValueState("blob", "blob binary")

        def handleInputRows(self, key, rows, timerValues):
            seen = _counts_of(rows)
            counts, blob = _merged(self.blob.get()[0] if self.blob.exists() else None, seen)
            self.blob.update((blob,))
            yield _rows(seen, counts)

        def close(self):
            pass

    return BlobCount()


def _key_processor():
    from pyspark.sql.streaming import StatefulProcessor

    class KeyCount(StatefulProcessor):
        """transformWithStateInPandas by key: one ValueState count per key."""

        def init(self, handle):
            self.count = handle.getValueState("count", "count long")

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd

            n = sum(len(f) for f in rows)
            total = (self.count.get()[0] if self.count.exists() else 0) + n
            self.count.update((total,))
            yield pd.DataFrame({"key": [key[0]], "count": [total]}, dtype="int64")

        def close(self):
            pass

    return KeyCount()


def transform_by_key_group(df, key_groups: int, state_dir: str):
    return _with_key_groups(df, key_groups).groupBy("kg").transformWithStateInPandas(
        _blob_processor(), OUTPUT, "Update", "None")


def transform_by_key(df, key_groups: int, state_dir: str):
    return df.groupBy("key").transformWithStateInPandas(_key_processor(), OUTPUT, "Update", "None")


def group_by_count(df, key_groups: int, state_dir: str):
    return df.groupBy("key").count()


#: name -> (state store provider, plan)
VARIANTS = {
    "groupBy().count()": (HDFS, group_by_count),
    "applyInPandas, key groups, no state": (HDFS, apply_in_pandas_stateless),
    "applyInPandasWithState, key groups": (HDFS, apply_in_pandas_with_state),
    "  same, RocksDB": (ROCKSDB, apply_in_pandas_with_state),
    "applyInPandas, key groups, own state": (HDFS, apply_in_pandas_own_state),
    "applyInArrow, key groups, own state": (HDFS, apply_in_arrow_own_state),
    "transformWithStateInPandas, key groups": (ROCKSDB, transform_by_key_group),
    "transformWithStateInPandas, keys": (ROCKSDB, transform_by_key),
}


def one_run(spark, name: str, records: int, keys: int, batches: int, key_groups: int) -> dict:
    """Run ``batches`` micro-batches of one variant; the medians of its batches' timings."""
    provider, plan = VARIANTS[name]
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    src = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", str(records))
           .option("numPartitions", "2").load()
           .selectExpr(f"value % {keys} AS key", "value"))
    work = tempfile.mkdtemp(prefix="bench-state-api-")
    query = (plan(src, key_groups, os.path.join(work, "state")).writeStream.format("noop")
             .outputMode("update").option("checkpointLocation", os.path.join(work, "chk"))
             .start())
    try:
        deadline = time.monotonic() + 600
        while True:
            progress = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
            if len(progress) >= batches:
                break
            if query.exception() is not None:
                raise RuntimeError(f"{name}: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: {len(progress)} of {batches} batches in 600 s")
            query.awaitTermination(0.2)
    finally:
        query.stop()
    progress = progress[1:batches]  # the first batch starts the state store and workers
    state = [state_store_ms(p) for p in progress]
    return {"batch": statistics.median(p["durationMs"]["triggerExecution"] for p in progress),
            "update": statistics.median(s.get("state upd", 0.0) for s in state),
            "commit": statistics.median(s.get("state commit", 0.0) for s in state)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=10_000, help="rows per micro-batch")
    parser.add_argument("--keys", type=int, default=997)
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--key-groups", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--variants", default=";".join(VARIANTS),
                        help="variant names separated by ';' (groupBy().count() always runs)")
    add_conf_argument(parser)
    args = parser.parse_args()
    chosen = ["groupBy().count()"] + [v for v in args.variants.split(";")
                                       if v and v != "groupBy().count()"]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")

    from pyspark.sql import SparkSession

    from barrier_kafka import recommended_spark_conf

    spark = (SparkSession.builder.master("local[2]").appName("bench-state-api")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.enabled", "false")
             .config(map=dict(recommended_spark_conf(), **session_conf(parser, args.conf)))
             .getOrCreate())
    settings = session_settings(spark)
    spark.sparkContext.setLogLevel("ERROR")
    results = {name: [] for name in chosen}
    for round_no in range(args.warmup + args.rounds):
        for name in chosen:
            res = one_run(spark, name, args.records, args.keys, args.batches, args.key_groups)
            label = "warm-up" if round_no < args.warmup else f"round {round_no - args.warmup + 1}"
            print(f"{label} {name}: batch {res['batch']:.0f} ms", flush=True)
            if round_no >= args.warmup:
                results[name].append(res)
    print(f"\n{args.records} records a batch, {args.keys} keys, {args.key_groups} key groups, "
          f"{args.batches - 1} batches a run, {args.rounds} alternated rounds after {args.warmup} "
          f"warm-up round(s); {settings}; "
          f"medians of the rounds' medians; load average {os.getloadavg()[0]:.1f}")
    print(f"{'variant':<40} {'batch ms':>9} {'update ms':>10} {'commit ms':>10} "
          f"{'batch vs count()':>17}")
    base = statistics.median(r["batch"] for r in results["groupBy().count()"])
    for name, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("batch", "update", "commit")}
        print(f"{name:<40} {med['batch']:>9.0f} {med['update']:>10.0f} {med['commit']:>10.0f} "
              f"{base / med['batch']:>16.2f}x")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
