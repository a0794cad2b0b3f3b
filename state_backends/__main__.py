"""Command line: ``python -m state_backends stats <uri> [--plot out.png] [--option k=v ...]``.

Prints the checkpoint statistics table of a backend; with ``--plot`` also writes a PNG. Also
``python -m state_backends list <uri>`` for completed checkpoints and savepoints.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    from state_backends.checkpoint_store import CompletedCheckpointStore
    from state_backends.exceptions import StateBackendError
    from state_backends.registry import backend_from_uri
    from state_backends.stats import format_stats_table, load_all_stats, plot_stats

    parser = argparse.ArgumentParser(prog="python -m state_backends")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_ in (("stats", "print checkpoint statistics (and plot them)"),
                        ("list", "list completed checkpoints and savepoints")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("uri", help="memory://name, file:///path or s3://bucket/prefix")
        p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                       help="backend option, e.g. s3.endpoint=http://127.0.0.1:9000")
        if name == "stats":
            p.add_argument("--plot", metavar="PNG", help="write a duration/size plot here")
    args = parser.parse_args(argv)
    options = {}
    for item in args.option:
        if "=" not in item:
            parser.error(f"--option {item!r} must be KEY=VALUE")
        k, v = item.split("=", 1)
        options[k] = v
    try:
        backend = backend_from_uri(args.uri, options)
        if args.command == "list":
            store = CompletedCheckpointStore(backend)
            print("completed checkpoints:", " ".join(map(str, store.completed_ids())) or "-")
            print("savepoints:", " ".join(store.savepoints()) or "-")
            return 0
        stats = load_all_stats(backend)
        print(format_stats_table(stats))
        if args.plot:
            print(f"plot written to {plot_stats(stats, args.plot)}")
    except StateBackendError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
