"""Where a batch's query planning goes on the driver (issue 15: every batch's fixed cost), the
exactly-once pipeline against the at-least-once one users run today, side by side in one
session (not a test).

    BARRIER_KAFKA_BOOTSTRAP=127.0.0.1:39092 python benchmarks/bench_batch_planning.py \\
        [--records 100000] [--batch 10000] [--rounds 2] \\
        [--variants "native,eo per-key arrow ranges packed"]

Spark plans each micro-batch again: a new ``IncrementalExecution`` of the query's plan, analysed,
optimised and planned on the driver's stream execution thread (``queryPlanning`` in the
progress). Each execution keeps a ``QueryPlanningTracker``: the time of its phases and, for
each rule of Spark's analyzer, optimizer and physical preparations, its time and how often it
ran and changed the plan. That tracker is thread-local, so it also counts analyzer runs nested in
the planning: ``ExpressionEncoder.resolveAndBind`` resolves an encoder by a whole run of Spark's
``SimpleAnalyzer``. Spark's ``applyInPandasWithState`` operator node
(``FlatMapGroupsInPandasWithStateExec``) resolves its state encoder that way when it is built, and
planning builds it again for every rule that changes it or a node below it, so ``encoders`` (the
effective runs of the analyzer's ``ResolveDeserializer``, which only an encoder's deserializer
needs) counts those copies.

For each pipeline (``benchmarks/bench_pipeline.py``'s names) the benchmark reads a fresh topic
of ``--records`` records of 997 keys in batches of ``--batch`` records and reads the tracker of
every batch after the first ``--skip`` once the next one has begun (the tracker is then final).
After one uncounted warm-up round the pipelines alternate; the table prints medians over the
counted batches: the progress's ``queryPlanning``, the tracker's phases, ``analyzer iter``
(iterations of the analyzer's resolution rules: one an analysis for a plan that is already
resolved, two or more for one that is not) and ``encoders``; then the rules that took the most
time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_pipeline import (SHUFFLE_PARTITIONS, produce,  # noqa: E402
                                       required_bootstrap, start_variant, variant_names)
from benchmarks.bench_sink import make_topic  # noqa: E402
from benchmarks.bench_source import spark_with_kafka_connector, use_spark_home  # noqa: E402
from benchmarks.stage_times import median_ms  # noqa: E402

KEYS = 997
PHASES = ("analysis", "optimization", "planning")
#: A rule of the analyzer's resolution batch: its invocations are that batch's iterations.
ITERATION_RULE = "Analyzer$ResolveReferences"
#: Changes a plan only where an encoder's deserializer is resolved.
ENCODER_RULE = "Analyzer$ResolveDeserializer"
POLL_S = 0.01
RUN_TIMEOUT_S = 600.0


def tracker_sample(execution) -> dict:
    """One batch's ``IncrementalExecution`` tracker as plain data: ``phases`` (ms of each phase
    it ran) and ``rules`` (short rule name -> [ms, invocations, effective invocations])."""
    tracker = execution.tracker()
    phases, rules = {}, {}
    it = tracker.phases().iterator()
    while it.hasNext():
        kv = it.next()
        phases[kv._1()] = kv._2().endTimeMs() - kv._2().startTimeMs()
    it = tracker.rules().iterator()
    while it.hasNext():
        kv = it.next()
        summary = kv._2()
        rules[kv._1().rsplit(".", 1)[-1]] = [summary.totalTimeNs() / 1e6,
                                             summary.numInvocations(),
                                             summary.numEffectiveInvocations()]
    return {"phases": phases, "rules": rules}


def summarize(samples: List[dict], top: int = 6) -> dict:
    """Medians over batches' tracker samples: each phase's ms, ``rules ms`` (all rules),
    ``analyzer iter`` and ``encoders`` (see the module docstring), and ``top``: the ``top``
    rules by median ms (a rule a batch did not run counts 0 ms there), as (name, ms)."""
    out = {p: median_ms(s["phases"].get(p, 0.0) for s in samples) for p in PHASES}
    out["rules ms"] = median_ms(sum(r[0] for r in s["rules"].values()) for s in samples)
    out["analyzer iter"] = median_ms(s["rules"].get(ITERATION_RULE, [0, 0, 0])[1]
                                     for s in samples)
    out["encoders"] = median_ms(s["rules"].get(ENCODER_RULE, [0, 0, 0])[2] for s in samples)
    names = {n for s in samples for n in s["rules"]}
    by_rule = {n: median_ms(s["rules"].get(n, [0.0])[0] for s in samples) for n in names}
    out["top"] = sorted(by_rule.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    out["batches"] = len(samples)
    return out


def one_run(spark, variant, bootstrap, records, batch, skip, max_partitions):
    """Tracker samples of ``variant``'s batches after the first ``skip``, and the progress's
    ``queryPlanning`` ms of the same batches."""
    src, out = make_topic(bootstrap, 4), make_topic(bootstrap, 2)
    produce(bootstrap, src, records, KEYS)
    work = tempfile.mkdtemp(prefix="bench-batch-plan-")
    query = start_variant(spark, variant, bootstrap, src, out, work, batch,
                          max_partitions=max_partitions)
    # Both pipelines read --batch records a batch (maxOffsetsPerTrigger); the barrier-kafka
    # source's packed rows make its numInputRows smaller than the records it read.
    expected = -(-records // batch)
    executions, samples, progress = {}, {}, {}
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        jquery = query._jsq.streamingQuery()
        while len(progress) < expected:
            if query.exception() is not None:
                raise RuntimeError(f"{variant}: the query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{variant}: {len(progress)} of {expected} batches with "
                                   f"input ran in {RUN_TIMEOUT_S:.0f} s")
            execution = jquery.lastExecution()
            if execution is not None:
                current = execution.currentBatchId()
                executions.setdefault(current, execution)
                for b in [b for b in executions if b < current]:
                    done = executions.pop(b)
                    if b >= skip:
                        samples[b] = tracker_sample(done)
            for p in query.recentProgress:
                if p["numInputRows"] > 0 and p["batchId"] not in progress:
                    progress[p["batchId"]] = p["durationMs"].get("queryPlanning", 0)
            time.sleep(POLL_S)   # polling the stream's last execution, not awaiting a result
    finally:
        query.stop()
        shutil.rmtree(work, ignore_errors=True)
    counted = sorted(set(samples) & set(progress))
    return [samples[b] for b in counted], [progress[b] for b in counted]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--skip", type=int, default=2,
                        help="the first batches of a run left out (the first plans more)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--variants", default="native,eo per-key arrow ranges packed")
    args = parser.parse_args()
    bootstrap = required_bootstrap(parser)
    variants = variant_names(parser, args.variants)
    use_spark_home("compiled")
    spark = spark_with_kafka_connector("bench-batch-plan-" + uuid.uuid4().hex[:6],
                                       shuffle_partitions=SHUFFLE_PARTITIONS)
    max_partitions = spark.sparkContext.defaultParallelism
    samples: Dict[str, List[dict]] = {v: [] for v in variants}
    planning: Dict[str, List[float]] = {v: [] for v in variants}
    try:
        for round_no in range(args.warmup + args.rounds):
            for v in variants:
                got, ms = one_run(spark, v, bootstrap, args.records, args.batch, args.skip,
                                  max_partitions)
                label = "warm-up" if round_no < args.warmup else "counted"
                print(f"{v}: {len(got)} batches, queryPlanning median "
                      f"{median_ms(ms):.0f} ms ({label})",
                      flush=True)
                if round_no >= args.warmup:
                    samples[v] += got
                    planning[v] += ms
    finally:
        spark.stop()
    print(f"\nA batch's query planning on the driver, median ms over the batches of "
          f"{args.rounds} alternated rounds after {args.warmup} warm-up round(s) "
          f"({args.records:,} records, {args.batch:,} a batch, the first {args.skip} of each run "
          f"left out); load average {os.getloadavg()[0]:.1f}")
    columns = ("queryPlanning",) + PHASES + ("rules ms", "analyzer iter", "encoders")
    print(f"{'pipeline':<34} {'n':>4} " + " ".join(f"{c:>13}" for c in columns))
    summaries = {}
    for v in variants:
        s = summaries[v] = summarize(samples[v])
        s["queryPlanning"] = median_ms(planning[v])
        print(f"{v:<34} {s['batches']:>4} " + " ".join(f"{s[c]:>13.1f}" for c in columns))
    print("\nthe rules that took the most time, median ms a batch")
    for v in variants:
        print(f"{v}: " + ", ".join(f"{name} {ms:.1f}" for name, ms in summaries[v]["top"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
