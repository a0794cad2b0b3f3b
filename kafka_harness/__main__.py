"""``python -m kafka_harness broker`` runs a broker in the foreground until Ctrl-C / SIGTERM;
``python -m kafka_harness jars`` only downloads the jars (CI warms its cache with it)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from kafka_harness.broker import BrokerStartError, KafkaBroker
from kafka_harness.jars import JarFetchError, fetch_broker_jars


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafka_harness")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("broker", help="run a single-node KRaft broker until interrupted")
    b.add_argument("--port", type=int)
    b.add_argument("--controller-port", type=int)
    b.add_argument("--data-dir")
    sub.add_parser("jars", help="download the broker jars into the cache and print the folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        if args.cmd == "jars":
            print(fetch_broker_jars())
            return 0
        broker = KafkaBroker(args.port, args.controller_port, args.data_dir).start()
    except (BrokerStartError, JarFetchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"BARRIER_KAFKA_BOOTSTRAP={broker.bootstrap}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
