"""``python -m barrier_sink lingering --bootstrap HOST:PORT --prefix P [--abort]``: list (and
optionally abort) open Kafka transactions whose transactional.id starts with P."""

from __future__ import annotations

import argparse
import sys

from barrier_sink.lingering import abort_lingering, list_lingering


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m barrier_sink")
    sub = parser.add_subparsers(dest="cmd", required=True)
    ling = sub.add_parser("lingering", help="list / abort open transactions by prefix")
    ling.add_argument("--bootstrap", required=True)
    ling.add_argument("--prefix", required=True)
    ling.add_argument("--abort", action="store_true")
    args = parser.parse_args(argv)
    conf = {"bootstrap_servers": args.bootstrap}
    txns = list_lingering(conf, args.prefix)
    print(f"{'transactional.id':60} {'state':14} {'producer':>9} {'epoch':>6} {'age_s':>8}")
    for t in txns:
        age = f"{t.age_ms / 1000:.0f}" if t.age_ms is not None else "-"
        print(f"{t.transactional_id:60} {t.state:14} {t.producer_id:>9} {t.producer_epoch:>6} "
              f"{age:>8}")
    print(f"{len(txns)} open transaction(s) with prefix {args.prefix!r}")
    if args.abort and txns:
        aborted = abort_lingering(conf, args.prefix)
        print(f"aborted {len(aborted)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
