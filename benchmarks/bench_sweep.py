"""The driver's sweep of lingering transactions (issue 15), which runs after every batch's commits,
on a real broker: what it asks the brokers and what it finds right after a commit.

Brokers keep every transactional.id their coordinators have seen, of every producer of the
cluster, until ``transactional.id.expiration.ms`` (7 days by default). For each ``--kept`` K,
K idle ids of "other producers" are made first (kept on the broker for the rest of its life),
then, alternated ``--repeats`` times:

* ``sweep``: the sink's listing, ``list_lingering(..., reuse_client=True)``: ListTransactions
  filtered to ``Ongoing`` by the brokers, then DescribeTransactions of the sink's own ids;
* ``unfiltered``: ListTransactions of every state, the request the sweep sent before stop 61.

Then one transactional producer of the sink's prefix commits or aborts ``--ends`` transactions
on two partitions (commits and aborts in turn; two ends listed by the sink, the next two
unfiltered, and so on, each the moment the end returned): ``listed`` counts the sink's listings that
named the transaction just ended (the sweep would have fenced it and logged a losing attempt),
``Prepare*`` the unfiltered answers that showed it as ``PrepareCommit`` / ``PrepareAbort``
(what the sweep counted as open before stop 61).

    BARRIER_KAFKA_BOOTSTRAP=<broker> python benchmarks/bench_sweep.py [--kept 0,2000]
    python benchmarks/bench_sweep.py            # starts its own broker
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_sink import make_topic  # noqa: E402

ENDING = ("PrepareCommit", "PrepareAbort")


def keep_idle_ids(bootstrap: str, count: int, tag: str) -> None:
    """Make ``count`` transactional ids the brokers keep (initialised, no transaction)."""
    from kafka import KafkaProducer

    def one(i: int) -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap,
                                 transactional_id=f"bench-sweep-other-{tag}-{i}")
        try:
            producer.init_transactions()
        finally:
            producer.close()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))


def time_listings(bootstrap: str, prefix: str, repeats: int) -> dict:
    """Median ms of the sweep's listing and of an unfiltered ListTransactions, alternated, and
    the rows of the unfiltered answer."""
    from kafka.admin import KafkaAdminClient

    from barrier_sink.lingering import list_lingering

    conf = {"bootstrap_servers": bootstrap}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    ms = {"sweep": [], "unfiltered": []}
    rows = 0
    try:
        list_lingering(conf, prefix, reuse_client=True)  # connections made, not timed
        admin.list_transactions()
        for _ in range(repeats):
            t0 = time.perf_counter()
            list_lingering(conf, prefix, reuse_client=True)
            ms["sweep"].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            listing = admin.list_transactions()
            ms["unfiltered"].append((time.perf_counter() - t0) * 1000)
            rows = sum(len(v) for v in listing.values())
    finally:
        admin.close()
    return {"sweep": statistics.median(ms["sweep"]),
            "unfiltered": statistics.median(ms["unfiltered"]), "rows": rows}


def listings_after_ends(bootstrap: str, topic: str, prefix: str, ends: int) -> dict:
    """End ``ends`` transactions (commits and aborts in turn) and list right after each."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient

    from barrier_sink.lingering import list_lingering

    conf = {"bootstrap_servers": bootstrap}
    tid = f"{prefix}-p0-a0-s0"
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    listed = ending = 0
    try:
        producer.init_transactions()
        for i in range(ends):
            producer.begin_transaction()
            for partition in (0, 1):
                producer.send(topic, b"x", partition=partition)
            producer.flush()
            producer.commit_transaction() if i % 4 in (0, 2) else producer.abort_transaction()
            if i % 4 < 2:  # each listing first, right after the end, every other time
                found = list_lingering(conf, prefix, reuse_client=True)
                listed += any(t.transactional_id == tid for t in found)
            else:
                answer = admin.list_transactions()
                ending += any(t.transactional_id == tid
                              and str(getattr(t.state, "value", t.state)) in ENDING
                              for rows in answer.values() for t in rows)
    finally:
        producer.close()
        admin.close()
    return {"listed": listed, "ending": ending, "each": sum(1 for i in range(ends) if i % 4 < 2)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kept", default="0,2000",
                        help="comma-separated counts of other producers' idle ids to add "
                             "(cumulative: each step adds the difference)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--ends", type=int, default=60)
    args = parser.parse_args()
    from kafka_harness.broker import env_or_own_broker

    bootstrap, broker = env_or_own_broker()
    try:
        topic = make_topic(bootstrap, 2)
        tag, made, rows = uuid.uuid4().hex[:6], 0, []
        for kept in [int(k) for k in args.kept.split(",")]:
            keep_idle_ids(bootstrap, kept - made, f"{tag}-{made}")
            made = max(made, kept)
            prefix = "bench-sweep-" + uuid.uuid4().hex[:6]
            timing = time_listings(bootstrap, prefix, args.repeats)
            rows.append((kept, timing, listings_after_ends(bootstrap, topic, prefix, args.ends)))
        print(f"\nthe sweep's listing, median of {args.repeats} alternated calls; "
              f"{args.ends} transactions ended, each listed the moment its end returned "
              f"(half by the sink, half unfiltered); load {os.getloadavg()[0]:.2f}")
        print(f"{'ids added':>9} {'rows kept':>9} {'sweep ms':>9} {'unfiltered ms':>14} "
              f"{'listed after end':>17} {'Prepare* after end':>19}")
        for kept, timing, after in rows:
            print(f"{kept:>9} {timing['rows']:>9} {timing['sweep']:>9.2f} "
                  f"{timing['unfiltered']:>14.2f} {after['listed']:>10}/{after['each']:<6} "
                  f"{after['ending']:>12}/{args.ends - after['each']:<6}")
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
