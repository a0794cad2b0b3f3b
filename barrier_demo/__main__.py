"""The README's main job: ``python -m barrier_demo``.

Runs an exactly-once Kafka -> aligned keyed count -> Kafka pipeline end to end on embedded
defaults (a Kafka broker started here from Apache's jars, local Spark, the filesystem state
backend), kills it with SIGKILL once mid-run, restarts it from its checkpoints, verifies the
output with a ``read_committed`` consumer and prints a report; writes the checkpoint plot.
Exits 0 only if nothing was lost or duplicated. Runs in the user's process (driver side).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid


def committed_records(storage: str, topic: str) -> int:
    from barrier_core.completed_offsets import read_completed_offsets
    from state_backends.registry import backend_from_uri

    done = read_completed_offsets(backend_from_uri(storage))
    return 0 if done is None else sum(done.offsets.get(topic, {}).values())


def run_pipeline(args, bootstrap, topics, workdir, crash_at=None) -> tuple:
    """Run ``barrier_demo.pipeline`` as a child process group; returns (exit code, seconds)."""
    from barrier_core import faults

    env = faults.without_faults(os.environ)
    if crash_at:  # the demo's deliberate kill: fault injection switched on for this child only
        env.update(faults.fault_env(os.path.join(workdir, "crash"), crash_at=crash_at))
    cmd = [sys.executable, "-m", "barrier_demo.pipeline", "--bootstrap", bootstrap,
           "--input", topics["in"], "--output", topics["out"], "--workdir", workdir,
           "--group", topics["group"], "--prefix", topics["prefix"],
           "--max-offsets-per-trigger", str(args.batch)]
    started = time.monotonic()
    with open(os.path.join(workdir, "pipeline.log"), "ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        storage = os.path.join(workdir, "storage")
        while proc.poll() is None:
            done = committed_records(storage, topics["in"])
            bar = int(30 * done / args.records)
            print(f"\r  [{'#' * bar}{'.' * (30 - bar)}] {done:>8}/{args.records} records "
                  f"committed, {time.monotonic() - started:5.0f}s", end="", flush=True)
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() - started > args.timeout:
                os.killpg(proc.pid, 9)
                raise SystemExit(f"\nthe pipeline did not finish in {args.timeout:.0f}s; "
                                 f"see {workdir}/pipeline.log")
    print()
    return proc.returncode, time.monotonic() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m barrier_demo", description=__doc__)
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--keys", type=int, default=500)
    parser.add_argument("--batch", type=int, default=15_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--crash-at", default="commit_after_metadata:2",
                        help="protocol step to SIGKILL at (barrier_core.faults.POINTS)")
    parser.add_argument("--output-dir", default="demo-output")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)

    from barrier_demo.sample_events import create_topics, produce_events
    from barrier_demo.verify import summarize, verify
    from barrier_sink.lingering import list_lingering
    from kafka_harness.broker import KafkaBroker
    from state_backends.registry import backend_from_uri
    from state_backends.stats import format_stats_table, load_all_stats, plot_stats

    out_dir = os.path.abspath(args.output_dir)
    workdir = os.path.join(out_dir, "run-" + uuid.uuid4().hex[:6])
    os.makedirs(workdir)
    broker = None
    bootstrap = os.environ.get("BARRIER_KAFKA_BOOTSTRAP")
    try:
        if not bootstrap:
            print("1/5 starting an embedded Kafka broker (jars from Maven Central, cached) ...")
            broker = KafkaBroker().start()
            bootstrap = broker.bootstrap
            print(f"    broker {bootstrap} up in {broker.start_seconds:.1f}s")
        else:
            print(f"1/5 using the Kafka broker at {bootstrap}")
        suffix = uuid.uuid4().hex[:6]
        topics = {"in": f"demo-events-{suffix}", "out": f"demo-counts-{suffix}",
                  "group": f"demo-group-{suffix}", "prefix": f"demo-{suffix}"}
        create_topics(bootstrap, {topics["in"]: 4, topics["out"]: 2})
        took = produce_events(bootstrap, topics["in"], 0, args.records, args.keys)
        print(f"2/5 produced {args.records} events ({args.keys} keys) to {topics['in']} "
              f"in {took:.1f}s")
        print(f"3/5 running the exactly-once pipeline; SIGKILL at {args.crash_at} ...")
        rc, first = run_pipeline(args, bootstrap, topics, workdir, args.crash_at)
        killed = rc == -9
        print(f"    pipeline {'killed (SIGKILL)' if killed else f'exited {rc}'} after {first:.0f}s")
        print("4/5 restarting from the same checkpoints ...")
        rc, second = run_pipeline(args, bootstrap, topics, workdir)
        if rc != 0:
            print(f"error: the restarted pipeline failed (exit {rc}); see {workdir}/pipeline.log")
            return 1
        print("5/5 verifying with a read_committed consumer ...")
        verdict = verify(bootstrap, topics["in"], topics["out"])
        backend = backend_from_uri(os.path.join(workdir, "storage"))
        stats = load_all_stats(backend)
        plot = plot_stats(stats, os.path.join(out_dir, "checkpoints.png"))
        lingering = list_lingering({"bootstrap_servers": bootstrap}, topics["prefix"])
        completed = [s for s in stats if s.status == "COMPLETED"]
        report = summarize(verdict)
        print("\n" + format_stats_table(stats))
        print("\n== barrier-kafka demo report ==")
        print(f"records in:              {report['input_records']}")
        print(f"records out (committed): {report['output_records']}")
        print(f"duplicates found:        {report['duplicates']}")
        print(f"lost:                    {report['lost']}")
        print(f"crash injected:          {args.crash_at} ({'killed' if killed else 'not reached'})")
        print(f"checkpoints completed:   {len(completed)}")
        if completed:
            durations = sorted(s.end_to_end_duration_ms for s in completed)
            print(f"checkpoint duration ms:  median {durations[len(durations) // 2]}, "
                  f"max {durations[-1]}")
        print(f"run time:                {first:.0f}s until the kill + {second:.0f}s after restart")
        print(f"open transactions left:  {len(lingering)}")
        print(f"checkpoint plot:         {plot}")
        ok = verdict.is_exactly_once and not lingering
        print("RESULT: exactly-once " + ("holds" if ok else "VIOLATED"))
        return 0 if ok else 1
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
