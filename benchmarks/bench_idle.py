"""What a caught-up query costs while no record arrives (issue 15: a footprint that stays flat),
the exactly-once pipeline against the at-least-once one users run today, side by side in one
session (not a test).

    BARRIER_KAFKA_BOOTSTRAP=127.0.0.1:39092 python benchmarks/bench_idle.py \\
        [--seconds 20] [--rounds 2] [--triggers default,1] \\
        [--variants "native,eo per-key arrow ranges packed"]

Each run: a fresh 4-partition topic with ``--records`` records of 997 keys, one of
``benchmarks/bench_pipeline.py``'s pipelines, by its name there (the default exactly-once one
has the settings docs/operations.md recommends: Arrow records, one call per range of key groups,
the source's packed rows, read in as many tasks as the session has cores), started on it with
the trigger named (``default``: no trigger set, Spark's ``ProcessingTime(0)``, which plans the
next batch as soon as the last planning found nothing, ``spark.sql.streaming.pollingDelay``
later; a number: a processing-time trigger of that many seconds), until the final count of
every key is visible to a ``read_committed`` consumer. Then the query is left alone for
``--settle`` seconds and the CPU each kind of process spends over the next ``--seconds`` is
taken from ``/proc`` (:mod:`benchmarks.process_cpu`), as cores (CPU seconds per second). A run
in which a batch with input ran during the window is reported, not counted: it was not idle.

After one uncounted warm-up round, variants alternate within each round (A B A B ...); the
table prints the median cores of each kind over the rounds and the ratio of the median total to
``native``'s. For a Python data source Spark calls the source's planner worker (a Python
process on the driver) for every planning, where Spark's own Kafka source plans in the JVM: the
``python driver`` column is that worker; ``of it jit`` is the Spark JVM's JIT compiler threads
(part of ``spark jvm``), which are still compiling in a young session whichever pipeline runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import process_cpu  # noqa: E402
from benchmarks.bench_pipeline import (SHUFFLE_PARTITIONS, cell_ratio, final_counts,  # noqa: E402
                                       produce, required_bootstrap, start_variant, variant_names)
from benchmarks.bench_sink import make_topic  # noqa: E402
from benchmarks.bench_source import spark_with_kafka_connector, use_spark_home  # noqa: E402
from benchmarks.visibility import final_count_offsets  # noqa: E402

#: The table's columns: the kinds of :mod:`benchmarks.process_cpu`, with the JIT's share of the
#: Spark JVM after it.
COLUMNS = process_cpu.KINDS[:1] + (process_cpu.JIT,) + process_cpu.KINDS[1:]
KEYS = 997


def cores(spent: Dict[str, float], jit_s: float, seconds: float) -> Dict[str, float]:
    """CPU seconds per second of each kind over a window of ``seconds``, the JIT's share apart,
    and ``total``: the kinds only (the JIT is a part of ``spark jvm``, not added again)."""
    if seconds <= 0:
        raise ValueError(f"a window of {seconds} s measures nothing")
    out = {k: spent.get(k, 0.0) / seconds for k in process_cpu.KINDS}
    out[process_cpu.JIT] = jit_s / seconds
    out["total"] = sum(out[k] for k in process_cpu.KINDS)
    return out


def medians(runs: List[Dict[str, float]]) -> Dict[str, float]:
    """The median of each column over ``runs`` (each a :func:`cores` result); NaN for none."""
    keys = COLUMNS + ("total",)
    if not runs:
        return {k: float("nan") for k in keys}
    return {k: statistics.median(r[k] for r in runs) for k in keys}


def ratio(native: Optional[Dict[str, float]], other: Dict[str, float]) -> float:
    """``other``'s median total over native's (NaN without native or when native spent none)."""
    if native is None or not native["total"] > 0:
        return float("nan")
    return other["total"] / native["total"]


def input_batches(progress) -> set:
    """The ids of the batches that read input, from a query's progress reports."""
    return {p["batchId"] for p in progress if p.get("numInputRows", 0) > 0}


def one_run(spark, variant, bootstrap, records, trigger_s, settle_s, seconds, max_partitions):
    """One idle window of ``variant``: its cores by kind, or None when a batch with input ran in
    the window (the run was not idle)."""
    src, out = make_topic(bootstrap, 4), make_topic(bootstrap, 2)
    produce(bootstrap, src, records, KEYS)
    work = tempfile.mkdtemp(prefix="bench-idle-")
    query = start_variant(spark, variant, bootstrap, src, out, work, 10_000,
                          max_partitions=max_partitions, trigger_s=trigger_s)
    try:
        query.processAllAvailable()
        if final_count_offsets(bootstrap, out, final_counts(records, KEYS), 600) is None:
            raise RuntimeError(f"{variant}: the final count of some key never became visible")
        time.sleep(settle_s)   # a measured quiet period, not a wait for a condition
        seen = input_batches(query.recentProgress)
        before, t0 = process_cpu.take(), time.monotonic()
        time.sleep(seconds)
        after, t1 = process_cpu.take(), time.monotonic()
        ran = input_batches(query.recentProgress)
    finally:
        query.stop()
        shutil.rmtree(work, ignore_errors=True)
    if ran - seen:
        print(f"{variant}: batches {sorted(ran - seen)} with input ran in the window; not counted",
              flush=True)
        return None
    return cores(process_cpu.spent(before, after), process_cpu.jit_spent(before, after),
                 t1 - t0)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0, help="the measured idle window")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds left alone after the last count is visible, before it")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--triggers", default="default,1",
                        help="comma-separated: 'default' (no trigger set) or seconds")
    parser.add_argument("--variants", default="native,eo per-key arrow ranges packed")
    args = parser.parse_args()
    bootstrap = required_bootstrap(parser)
    variants = variant_names(parser, args.variants)
    triggers = []
    for t in args.triggers.split(","):
        t = t.strip()
        try:
            triggers.append(None if t == "default" else float(t))
        except ValueError:
            parser.error(f"trigger {t!r} is neither 'default' nor a number of seconds")
    use_spark_home("compiled")
    spark = spark_with_kafka_connector("bench-idle-" + uuid.uuid4().hex[:6],
                                       shuffle_partitions=SHUFFLE_PARTITIONS)
    # as bench_pipeline's default: the barrier-kafka source reads in as many tasks as cores
    max_partitions = spark.sparkContext.defaultParallelism
    table = []
    try:
        warmup = args.warmup
        for trigger_s in triggers:
            runs = {v: [] for v in variants}
            for round_no in range(warmup + args.rounds):
                for v in variants:
                    got = one_run(spark, v, bootstrap, args.records, trigger_s, args.settle,
                                  args.seconds, max_partitions)
                    label = "warm-up" if round_no < warmup else "counted"
                    total = "-" if got is None else f"{got['total']:.3f} cores"
                    print(f"trigger {trigger_s or 'default'} {v}: {total} ({label})", flush=True)
                    if round_no >= warmup and got is not None:
                        runs[v].append(got)
            warmup = 0
            med = {v: medians(runs[v]) for v in variants}
            for v in variants:
                table.append((trigger_s, v, len(runs[v]), med[v], ratio(med.get("native"),
                                                                         med[v])))
    finally:
        spark.stop()
    print(f"\nA caught-up query, idle: cores (CPU s per s) by process over {args.seconds:.0f} s, "
          f"median of {args.rounds} alternated rounds after {args.warmup} warm-up round(s); "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"{'trigger':>8} {'pipeline':<30} {'n':>2} "
          + " ".join(f"{c:>13}" for c in COLUMNS) + f" {'total':>7} {'vs native':>10}")
    for trigger_s, v, n, m, x in table:
        label = "default" if trigger_s is None else f"{trigger_s:g} s"
        print(f"{label:>8} {v:<30} {n:>2} " + " ".join(f"{m[c]:>13.3f}" for c in COLUMNS)
              + f" {m['total']:>7.3f} {cell_ratio(x):>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
