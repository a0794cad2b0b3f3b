"""Footprint soak of the exactly-once pipeline (issue 13): does anything grow with the number of
micro-batches?

barrier-kafka source -> keyed running count -> two-phase-commit Kafka sink, one checkpoint per
micro-batch, small batches, with the checkpoint storage on S3 (a moto server started here, reached
through a counting proxy so that LIST requests are counted at the server side of the wire). Every
``--every`` batches it prints:

* distinct transactional ids of the sink on the broker (Kafka's ListTransactions) and how many
  appeared since the previous row, and the distinct producer ids those ids were seen with so
  far (DescribeTransactions at every row: a new id allocates a new producer id);
* objects and bytes in the checkpoint storage;
* S3 LIST requests per completed checkpoint in the window, and all S3 requests per checkpoint;
* median micro-batch time and median checkpoint end-to-end time (``chk-<n>/_stats.json``).

    python benchmarks/bench_soak.py                      # 2,000 batches, own broker
    BARRIER_KAFKA_BOOTSTRAP=<broker> python benchmarks/bench_soak.py --batches 500 --every 100
    python benchmarks/bench_soak.py --storage local      # local folder: ~3x faster batches,
                                                         # no S3 request columns

Flat columns after warm-up mean the footprint does not grow; a column that grows by the same
amount every row grows without bound.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class CountingProxy:
    """An HTTP proxy in front of the S3 server that counts requests by kind."""

    def __init__(self, upstream_port: int) -> None:
        self.counts: Counter = Counter()
        self.shapes: Counter = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                kind = "list" if self.command == "GET" and (
                    "list-type=" in self.path or "prefix=" in self.path) else self.command.lower()
                shape = proxy.shape(self.command, self.path)
                with proxy._lock:
                    proxy.counts[kind] += 1
                    proxy.shapes[shape] += 1
                conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def shape(command: str, path: str) -> str:
        """A request with its run id and numbers blanked: ``GET chk-N/_stats.json``."""
        from urllib.parse import parse_qs, unquote, urlsplit

        parts = urlsplit(path)
        key = unquote(parts.path).split("/", 3)[-1]
        prefix = parse_qs(parts.query).get("prefix", [None])[0]
        if prefix is not None:
            key = "LIST " + prefix.split("/", 1)[-1]
            command = ""
        return re.sub(r"\d+", "N", f"{command} {key}".strip())

    def snapshot(self) -> Counter:
        with self._lock:
            return Counter(self.counts)


def storage_footprint(s3, bucket: str, prefix: str):
    objects = size = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            objects += 1
            size += o["Size"]
    return objects, size


def sink_transactional_ids(admin, prefix: str) -> int:
    from barrier_sink.options import is_sink_transactional_id

    listing = admin.list_transactions()
    return len({t.transactional_id for rows in listing.values() for t in rows
                if is_sink_transactional_id(prefix, t.transactional_id)})


def sink_producer_ids(admin, prefix: str) -> set:
    """Producer ids the sink's transactional ids hold now (DescribeTransactions)."""
    from barrier_sink.options import is_sink_transactional_id

    listing = admin.list_transactions()
    ids = sorted({t.transactional_id for rows in listing.values() for t in rows
                  if is_sink_transactional_id(prefix, t.transactional_id)})
    if not ids:
        return set()
    described = admin.describe_transactions(ids)
    values = described.values() if isinstance(described, dict) else described
    return {d.producer_id for d in values}


def local_footprint(folder: str):
    objects = size = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            objects += 1
            size += os.path.getsize(os.path.join(root, name))
    return objects, size


def checkpoint_e2e_ms(stats_docs) -> float:
    out = [d["end_to_end_duration_ms"] for d in stats_docs if d.get("status") == "COMPLETED"]
    return statistics.median(out) if out else float("nan")


def s3_stats_docs(s3, bucket: str, prefix: str) -> list:
    import json

    return [json.loads(s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read())
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", []) if o["Key"].endswith("/_stats.json")]


def local_stats_docs(folder: str) -> list:
    import glob
    import json

    docs = []
    for path in glob.glob(os.path.join(folder, "**", "_stats.json"), recursive=True):
        with open(path) as f:
            docs.append(json.load(f))
    return docs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--records-per-batch", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--storage", choices=("s3", "local"), default="s3",
                        help="checkpoint storage: moto S3 behind a counting proxy, or a folder")
    args = parser.parse_args()

    import boto3
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient

    from barrier_core.completed_offsets import read_completed_offsets
    from barrier_ops.examples.running_count import OUTPUT_SCHEMA, RunningCount
    from barrier_ops.operator import keyed_process
    from kafka_harness.broker import env_or_own_broker
    from kafka_harness.s3 import S3Server
    from kafka_harness.spark import build_spark
    from kafka_harness.topics import create_topic
    from state_backends.registry import backend_from_uri

    bootstrap, broker = env_or_own_broker("soak-broker-")
    run, workdir = uuid.uuid4().hex[:8], tempfile.mkdtemp(prefix="soak-")
    if args.storage == "s3":
        s3_server = S3Server().start()
        proxy = CountingProxy(s3_server.port)
        s3 = boto3.client("s3", **s3_server.client_kwargs())
        bucket = "soak"
        s3.create_bucket(Bucket=bucket)
        storage = f"s3://{bucket}/{run}"
        s3_options = {"s3.endpoint": f"http://127.0.0.1:{proxy.port}",
                      "s3.access.key": s3_server.access_key,
                      "s3.secret.key": s3_server.secret_key, "s3.region": s3_server.region}
        completed_backend = backend_from_uri(storage, {**s3_options,
                                                       "s3.endpoint": s3_server.endpoint_url})

        def footprint():
            return storage_footprint(s3, bucket, run)

        def stats_docs():
            return s3_stats_docs(s3, bucket, run)
    else:
        s3_server = proxy = None
        storage, s3_options = os.path.join(workdir, "storage"), {}
        completed_backend = backend_from_uri(storage)

        def footprint():
            return local_footprint(storage)

        def stats_docs():
            return local_stats_docs(storage)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    topic, out, prefix = f"soak-in-{run}", f"soak-out-{run}", f"soak-{run}"
    create_topic(admin, topic, args.partitions)
    create_topic(admin, out, args.partitions)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    total = args.batches * args.records_per_batch
    for i in range(total):
        producer.send(topic, key=b"k%d" % (i % 97), value=b"v%d" % i)
    producer.flush()
    producer.close()

    spark = build_spark("barrier-kafka-soak", shuffle_partitions=2)
    src = (spark.readStream.format("barrier-kafka")
           .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
           .option("startingOffsets", "earliest").option("checkpoint.storage", storage)
           .option("maxOffsetsPerTrigger", str(args.records_per_batch))
           .option("execution.checkpointing.interval-batches", "1").options(**s3_options).load())
    counted = keyed_process(src, "key", RunningCount(), OUTPUT_SCHEMA, operator_id="soak-count",
                            state_backend=storage, state_backend_options=s3_options,
                            max_parallelism=4)
    query = (counted.writeStream.format("barrier-kafka")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
             .option("transactionalIdPrefix", prefix).option("checkpoint.storage", storage)
             .options(**s3_options).option("checkpointLocation", os.path.join(workdir, "chk"))
             .start())
    header = (f"{'batches':>8} {'txn ids':>8} {'new ids':>8} {'pids':>6} {'objects':>8} {'KiB':>8} "
              f"{'LIST/chk':>9} {'S3 req/chk':>10} {'batch p50 ms':>12} {'chk e2e p50 ms':>14}")
    print(f"soak: {args.batches} batches of {args.records_per_batch} records, "
          f"{args.partitions} partitions, storage {storage}"
          f"{' (moto via counting proxy)' if proxy else ''}, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    print(header, flush=True)
    last_requests, last_done, last_ids, next_row = Counter(), 0, 0, args.every
    producer_ids = set()
    seen_batches = set()
    durations = []
    started = time.monotonic()
    try:
        while next_row <= args.batches:
            if query.exception() is not None:
                raise query.exception()
            for p in query.recentProgress:
                if p["batchId"] not in seen_batches and p.get("numInputRows", 0) > 0:
                    seen_batches.add(p["batchId"])
                    durations.append(p["durationMs"].get("triggerExecution", 0))
            if len(seen_batches) < next_row:
                time.sleep(0.5)
                continue
            requests = proxy.snapshot() if proxy else Counter()
            done = read_completed_offsets(completed_backend)
            done_id = done.checkpoint_id if done else 0
            window = max(1, done_id - last_done)
            ids = sink_transactional_ids(admin, prefix)
            producer_ids |= sink_producer_ids(admin, prefix)
            objects, size = footprint()
            delta = requests - last_requests
            recent = durations[-args.every:]
            listed = (f"{delta['list'] / window:>9.1f} {sum(delta.values()) / window:>10.1f}"
                      if proxy else f"{'-':>9} {'-':>10}")
            print(f"{next_row:>8} {ids:>8} {ids - last_ids:>8} {len(producer_ids):>6} "
                  f"{objects:>8} {size / 1024:>8.0f} {listed} "
                  f"{statistics.median(recent):>12.0f} {checkpoint_e2e_ms(stats_docs()):>14.0f}",
                  flush=True)
            last_requests, last_done, last_ids = requests, done_id, ids
            next_row += args.every
    finally:
        query.stop()
        admin.close()
        spark.stop()
        if s3_server is not None:
            s3_server.stop()
        if broker is not None:
            broker.stop()
    print(f"{args.batches} batches in {time.monotonic() - started:.0f} s", flush=True)
    if proxy is not None and last_done:
        print(f"S3 requests per completed checkpoint, by kind ({last_done} checkpoints):")
        for shape, n in proxy.shapes.most_common():
            print(f"{n / last_done:>8.1f}  {shape}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
