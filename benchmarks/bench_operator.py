"""Benchmark: barrier-aligned keyed count vs plain ``groupBy().count()`` in the same run.

Runs on the driver (local Spark). Both queries read the same generated stream (``bench-gen``
source: ``--partitions`` channels, ``--records`` records per batch spread over the channels,
``--keys`` distinct keys, a barrier at the end of every channel's range in every batch) and write
to ``foreachBatch`` collecting the small control/result rows. A third run skews the barriers
(channel 1 delivers barrier n one batch late, like a timestamp cut) to show alignment across
micro-batches (records held back, alignment time). A fourth run reads the same records packed
per key group (the source option ``packedKeyGroups``: one row per key group, channel and epoch,
see :mod:`barrier_core.packed_source`). ``api-floor`` is ``applyInPandasWithState`` itself on
the operator's layout (the same key groups and input columns, records only) with a function that
only counts each key group's keys: the part of the keyed operator's cost that is Spark's stateful
Python API and not the operator's own work. ``keyed-ranges`` is the keyed count with the
settings operations.md recommends (``parallelism`` = shuffle partitions, records as Arrow),
``api-floor-ranges`` its floor (one call a task), and ``keyed-packed-ranges`` the same settings
on the source's packed rows (``packed`` = ``--max-parallelism``); ``...-runtimes`` those two with
each range's state between batches in the state backend (``runtime_store="backend"``: stateless
``applyInPandas``, so no ``applyInPandasWithState`` floor applies). ``--rounds`` repeats the runs
alternated (A B C ..., A B C ...) and the table gives each query's best and median.

    python benchmarks/bench_operator.py --batches 8 --records 20000 --keys 1000 --rounds 3
    python benchmarks/bench_operator.py --rounds 6 --queries keyed-ranges,api-floor-ranges
    python benchmarks/bench_operator.py --rounds 3 --queries \
        keyed-ranges,keyed-packed-ranges,keyed-ranges-runtimes,keyed-packed-ranges-runtimes
    python benchmarks/bench_operator.py --rounds 2 --records 100000 --batches 6 \
        --max-parallelism 128 --queries keyed-ranges,keyed-packed-ranges
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition  # noqa: E402


class _Part(InputPartition):
    def __init__(self, p, b0, b1):
        self.p, self.b0, self.b1 = p, b0, b1


class GenReader(DataSourceStreamReader):
    def __init__(self, options):
        self.n = int(options["partitions"])
        self.r = int(options["records"]) // self.n
        self.batches = int(options["batches"])
        self.keys = int(options["keys"])
        self.skew = options.get("skew", "false") == "true"
        self.packed = int(options.get("packed", "0"))

    def initialOffset(self):
        return {"batch": 0}

    def latestOffset(self, start, limit):
        return {"batch": min(int(start["batch"]) + 1, self.batches)}

    def partitions(self, start, end):
        return [_Part(p, start["batch"], end["batch"]) for p in range(self.n)]

    def read(self, part):
        if not self.packed:
            yield from self._rows(part)
            return
        from barrier_core.packed_source import pack, packed_schema
        from barrier_core.schema import source_schema, spark_arrow_schema

        schema = spark_arrow_schema(packed_schema(source_schema(), self.packed))
        for batch in self._rows(part):
            yield pack(batch, schema, self.packed)

    def _rows(self, part):
        import pyarrow as pa

        from barrier_core.schema import source_schema

        ts = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        chans = [f"bench:{p}" for p in range(self.n)]
        late = self.skew and part.p == 1
        for b in range(part.b0, part.b1):
            lo, hi = b * self.r, (b + 1) * self.r
            if late and b > 0:  # barrier of the previous batch, delivered one batch late
                yield _barrier(part.p, lo, b, ts, chans)
            epoch = b + 1  # records between barrier b and b + 1 (late or not: same offsets)
            keys = [f"k{(o * 2654435761) % self.keys}".encode() for o in range(lo, hi)]
            names = [f.name for f in source_schema().fields]
            cols = {"key": keys, "value": [None] * (hi - lo), "topic": ["bench"] * (hi - lo),
                    "partition": [part.p] * (hi - lo), "offset": list(range(lo, hi)),
                    "timestamp": [ts] * (hi - lo), "timestampType": [0] * (hi - lo),
                    "kind": ["record"] * (hi - lo), "checkpoint_id": [epoch] * (hi - lo),
                    "checkpoint_timestamp": [None] * (hi - lo),
                    "barrier_channels": [None] * (hi - lo)}
            schema = _arrow_schema()
            yield pa.RecordBatch.from_pydict({n: cols[n] for n in names}, schema=schema)
            if not late or b == self.batches - 1:
                yield _barrier(part.p, hi, b + 1, ts, chans)

    def commit(self, end):
        pass


def _barrier(p, offset, cid, ts, chans):
    import pyarrow as pa

    cols = {"key": [None], "value": [None], "topic": ["bench"], "partition": [p],
            "offset": [offset], "timestamp": [ts], "timestampType": [0], "kind": ["barrier"],
            "checkpoint_id": [cid], "checkpoint_timestamp": [0], "barrier_channels": [chans]}
    schema = _arrow_schema()
    return pa.RecordBatch.from_pydict({n: cols[n] for n in schema.names}, schema=schema)


def _arrow_schema():
    from pyspark.sql.pandas.types import to_arrow_schema

    from barrier_core.schema import source_schema

    return to_arrow_schema(source_schema(), timezone="UTC")


def floor_count(key, frames, state):
    """``api-floor``'s function (executor): the keys of the key group's batch counted, one row
    out, one long of state; no barriers, alignment or snapshots."""
    import pandas as pd

    keys = sum(int(f["key"].nunique()) for f in frames)
    state.update(((state.get[0] if state.exists else 0) + keys,))
    yield pd.DataFrame({"key_group": [int(key[0])], "keys": [keys], "kind": [None]})


class GenSource(DataSource):
    @classmethod
    def name(cls):
        return "bench-gen"

    def schema(self):
        from barrier_core.packed_source import packed_schema
        from barrier_core.schema import source_schema

        packed = int(self.options.get("packed", "0"))
        return packed_schema(source_schema(), packed) if packed else source_schema()

    def streamReader(self, schema):
        return GenReader(self.options)


def run(spark, build, opts, name):
    df = spark.readStream.format("bench-gen").options(**opts).load()
    out = build(df)
    collected, durations = [], []

    def sink(bdf, batch_id):
        t = time.perf_counter()
        collected.extend(r.asDict() for r in bdf.filter("kind is null or kind != 'record'")
                         .collect())
        durations.append(time.perf_counter() - t)

    chk = tempfile.mkdtemp(prefix=f"bench-{name}-")
    mode = "update" if name in ("plain", "warmup") else "append"
    start = time.perf_counter()
    q = (out.writeStream.foreachBatch(sink).outputMode(mode)
         .option("checkpointLocation", chk).start())
    q.processAllAvailable()
    wall = time.perf_counter() - start
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    q.stop()
    shutil.rmtree(chk, ignore_errors=True)
    return wall, progress, collected, durations


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--max-parallelism", type=int, default=32)
    ap.add_argument("--shuffle-partitions", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternated rounds of the eight queries; best and median reported")
    ap.add_argument("--queries", default=None,
                    help="comma-separated names of the queries to run (default: all eight; "
                         "plain is always run, as every ratio's base)")
    args = ap.parse_args(argv)

    from pyspark.sql import functions as F

    from barrier_ops.examples.word_count import keyed_count
    from kafka_harness.spark import build_spark

    spark = build_spark("bench-operator", shuffle_partitions=args.shuffle_partitions)
    spark.dataSource.register(GenSource)
    state = tempfile.mkdtemp(prefix="bench-state-")
    base = {"partitions": args.partitions, "records": args.records, "batches": args.batches,
            "keys": args.keys}
    total = args.records // args.partitions * args.partitions * args.batches

    def plain(df):
        return df.filter(F.col("kind") == "record").groupBy("key").count() \
            .withColumn("kind", F.lit(None).cast("string"))

    def keyed(sub, **settings):
        return lambda df: keyed_count(df, "key", f"file://{state}/{sub}", operator_id="bench",
                                      max_parallelism=args.max_parallelism, **settings)

    def api_floor(ranges):
        from barrier_ops.operator import (KEY_GROUP_COLUMN, RANGE_COLUMN, with_key_groups,
                                          with_ranges)

        def build(df):
            records = with_key_groups(df, "key", args.max_parallelism).filter(
                F.col("kind") == "record")
            group = KEY_GROUP_COLUMN
            if ranges:
                records, group = with_ranges(records, args.max_parallelism, ranges), RANGE_COLUMN
            return records.groupBy(group).applyInPandasWithState(
                floor_count, "key_group int, keys long, kind string", "keys long", "append",
                "NoTimeout")
        return build

    run(spark, plain, dict(base, batches=2), "warmup")  # JVM, Python workers, codegen
    queries = (("plain", plain, base), ("keyed", keyed("a"), base),
               ("keyed-skewed", keyed("b"), dict(base, skew="true")),
               ("keyed-packed", keyed("c"), dict(base, packed=args.max_parallelism)),
               ("api-floor", api_floor(None), base),
               # the settings operations.md recommends: one call a task, records as Arrow
               ("keyed-ranges", keyed("d", parallelism=args.shuffle_partitions,
                                      records_format="arrow"), base),
               ("api-floor-ranges", api_floor(args.shuffle_partitions), base),
               # the same on the source's packed rows (packedKeyGroups = max_parallelism)
               ("keyed-packed-ranges", keyed("e", parallelism=args.shuffle_partitions,
                                             records_format="arrow"),
                dict(base, packed=args.max_parallelism)),
               # those two with each range's state between batches in the state backend
               ("keyed-ranges-runtimes", keyed("f", parallelism=args.shuffle_partitions,
                                               records_format="arrow",
                                               runtime_store="backend"), base),
               ("keyed-packed-ranges-runtimes", keyed("g", parallelism=args.shuffle_partitions,
                                                      records_format="arrow",
                                                      runtime_store="backend"),
                dict(base, packed=args.max_parallelism)))
    if args.queries:
        wanted = {"plain", *args.queries.split(",")}
        unknown = wanted - {name for name, _, _ in queries}
        if unknown:
            raise SystemExit(f"unknown queries {sorted(unknown)}: choose from "
                             f"{', '.join(name for name, _, _ in queries)}")
        queries = tuple(q for q in queries if q[0] in wanted)
    results = {name: [] for name, _, _ in queries}
    loads = []
    for round_no in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for name, build, opts in queries:
            shutil.rmtree(state, ignore_errors=True)
            wall, progress, collected, _ = run(spark, build, opts, name)
            batch_ms = [p["durationMs"]["triggerExecution"] for p in progress]
            acks = [json.loads(r["ack"]) for r in collected if r.get("kind") == "ack"]
            # Records, not input rows: every query reads every record, packed rows are fewer.
            results[name].append(dict(wall=wall, batch_ms=batch_ms, acks=acks,
                                      rate=total / (sum(batch_ms) / 1000.0)))
            print(f"round {round_no + 1} {name}: {wall:.1f}s, {len(progress)} batches, "
                  f"{len(acks)} acks", flush=True)

    def row(name):
        runs = sorted(results[name], key=lambda r: r["rate"])
        r = runs[len(runs) // 2]  # the details of the median run (of the upper one if even)
        best, median = runs[-1]["rate"], statistics.median(run["rate"] for run in runs)
        steady = r["batch_ms"][1:] or r["batch_ms"]
        acks = r["acks"]
        al = [a["metrics"]["alignment_ms"] for a in acks]
        held = [a["metrics"]["held_back_records"] for a in acks]
        sync = [a["metrics"]["sync_ms"] for a in acks]
        size = [a["metrics"]["state_bytes"] for a in acks]
        ckpts = len({a["checkpoint_id"] for a in acks})
        return (name, best, median, statistics.median(steady), max(steady),
                statistics.median(al) if al else 0.0, max(al) if al else 0.0,
                sum(held) / max(ckpts, 1), statistics.median(sync) if sync else 0.0,
                sum(size) / max(ckpts, 1) / 1024)

    print()
    print(f"records={total} ({args.batches} batches x {args.records}), keys={args.keys}, "
          f"channels={args.partitions}, max_parallelism={args.max_parallelism}, "
          f"shuffle partitions={args.shuffle_partitions}, {args.rounds} alternated rounds, "
          f"load average {min(loads):.1f}-{max(loads):.1f}")
    hdr = ("query", "best records/s", "median records/s", "batch p50 ms", "batch max ms",
           "align p50 ms", "align max ms", "held/ckpt", "sync p50 ms", "state KiB/ckpt")
    print("(records/s over the sum of batch times; the other columns from the median run)")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    rows = {n: row(n) for n in results}
    for r in rows.values():
        print(f"| {r[0]} | {r[1]:,.0f} | {r[2]:,.0f} | {r[3]:.0f} | {r[4]:.0f} | {r[5]:.2f} | "
              f"{r[6]:.1f} | {r[7]:,.0f} | {r[8]:.1f} | {r[9]:.1f} |")
    print("\n| ratio (goal >= 0.9x) | best | median | added batch p50 ms |")
    print("|---|---|---|---|")
    for name, base_name in (("keyed", "plain"), ("keyed-packed", "plain"),
                            ("api-floor", "plain"), ("keyed", "api-floor"),
                            ("keyed-ranges", "plain"), ("api-floor-ranges", "plain"),
                            ("keyed-ranges", "api-floor-ranges"),
                            ("keyed-packed-ranges", "plain"),
                            ("keyed-ranges-runtimes", "plain"),
                            ("keyed-packed-ranges-runtimes", "plain")):
        if name not in rows or base_name not in rows:
            continue
        r, b = rows[name], rows[base_name]
        print(f"| {name} / {base_name} | {r[1] / b[1]:.2f}x | {r[2] / b[2]:.2f}x | "
              f"{r[3] - b[3]:+.0f} |")
    shutil.rmtree(state, ignore_errors=True)
    spark.stop()


if __name__ == "__main__":
    main()
