"""Driver-side commit time of one checkpoint against its number of transactions (issue 13):
one EndTxn per transaction, sent one after another (parallelism 1, the old behaviour) or
concurrently (``SinkCommitter.COMMIT_PARALLELISM``), on a real broker.

For each size H, H pre-committed transactions (one per sink task, 100 records each) are made
with the sink's own executor code, then committed by the sink's driver committer when their
checkpoint completes. Sequential and concurrent runs alternate (A B A B ...); the table shows
the best and the median of ``--repeats`` runs and their ratio.

    BARRIER_KAFKA_BOOTSTRAP=<broker> python benchmarks/bench_commit.py [--sizes 2,16,64]
    python benchmarks/bench_commit.py            # starts its own broker
"""

from __future__ import annotations

import argparse
import pickle
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyspark.sql.types import LongType, StringType, StructField, StructType  # noqa: E402

SCHEMA = StructType([StructField("kind", StringType()), StructField("checkpoint_id", LongType()),
                     StructField("value", StringType())])


def one_round(bootstrap: str, topic: str, tasks: int, parallelism: int) -> float:
    """Seconds the driver takes to commit one checkpoint of ``tasks`` transactions."""
    from barrier_sink.kafka_sink import KafkaTwoPhaseCommitWriter
    from barrier_sink.messages import SinkCommitMessage

    workdir = tempfile.mkdtemp(prefix="bench-commit-")
    writer = KafkaTwoPhaseCommitWriter(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic,
         "transactionalIdPrefix": "bench-" + uuid.uuid4().hex[:8],
         "checkpointLocation": os.path.join(workdir, "chk")}, SCHEMA)
    channels = [f"in:{t}" for t in range(tasks)]
    messages = []
    task_writer = pickle.loads(pickle.dumps(writer))  # as Spark ships it to the tasks
    for t in range(tasks):
        txn = task_writer.begin_transaction(0, t, 0, 1)
        for i in range(100):
            task_writer.invoke(txn, {"kind": "record", "checkpoint_id": 1, "value": f"v{t}-{i}"})
        barrier = {"checkpoint_id": 1, "channel": f"in:{t}", "offset": 100,
                   "channels": channels, "timestamp": int(time.time() * 1000)}
        messages.append(SinkCommitMessage(0, t, handles=[task_writer.pre_commit(txn)],
                                          barriers=[barrier], records=100))
    committer = writer.committer()
    committer.COMMIT_PARALLELISM = parallelism
    started = time.perf_counter()
    committer.on_batch_committed(0, messages)
    elapsed = time.perf_counter() - started
    shutil.rmtree(workdir, ignore_errors=True)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2,16,64")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from kafka_harness.broker import env_or_own_broker

    bootstrap, broker = env_or_own_broker()
    try:
        from kafka.admin import KafkaAdminClient

        from barrier_sink.committer import SinkCommitter
        from kafka_harness.topics import create_topic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        topic = create_topic(admin, "bench_commit_" + uuid.uuid4().hex[:6], 4)
        admin.close()
        load = os.getloadavg()[0]
        rows = []
        for size in [int(x) for x in args.sizes.split(",")]:
            runs = {1: [], SinkCommitter.COMMIT_PARALLELISM: []}
            for _ in range(args.repeats):
                for p in runs:  # alternate A B A B
                    runs[p].append(one_round(bootstrap, topic, size, p))
            seq, par = runs[1], runs[SinkCommitter.COMMIT_PARALLELISM]
            rows.append((size, min(seq), statistics.median(seq), min(par),
                         statistics.median(par)))
        print(f"\ncommit of one checkpoint, {args.repeats} alternated rounds, load {load:.2f}")
        print(f"{'transactions':>12} {'sequential best':>16} {'median':>8} "
              f"{'concurrent best':>16} {'median':>8} {'speed-up (median)':>18}")
        for size, sb, sm, pb, pm in rows:
            print(f"{size:>12} {sb:15.3f}s {sm:7.3f}s {pb:15.3f}s {pm:7.3f}s {sm / pm:17.2f}x")
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
