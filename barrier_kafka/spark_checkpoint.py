"""Spark's own ``checkpointLocation`` after a crash in the middle of a query's first batch (driver,
before the query starts).

Spark writes each entry of its offset and commit logs to a hidden temporary file next to it
(``offsets/.0.<uuid>.tmp``, with Hadoop's checksum ``offsets/..0.<uuid>.tmp.crc``) and renames it
to ``offsets/0``. A process killed between the write and the rename leaves the temporary file;
Spark's logs never read one. But since Spark 4.1 (SPARK-53103), a query whose logs hold no batch
checks that its ``offsets/``, ``commits/`` and ``state/`` folders are empty before it starts, and
that check counts the leftover file: such a query fails at every start with
``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY`` ("The checkpoint location .../offsets should be
empty on batch 0"), however often it is restarted. The random-kill test met it when a kill landed
in the first run's write of ``offsets/0``. Nothing was committed at that point (no batch had
run), so nothing is lost by removing the file, and Spark's own advice, a new checkpoint location,
would give the query a location its checkpoint storage does not belong to.

:func:`clear_dead_first_writes` removes those temporary files, and only them, when the location's
offset log holds no entry (the only case in which Spark checks); call it before ``start()`` in
the job's launch code (``barrier_demo.pipeline`` does). ``python -m barrier_kafka.spark_checkpoint
<checkpointLocation> [--remove]`` lists (and removes) them by hand. It handles a local or mounted
folder (a path or a ``file:`` URI); for another file system it does nothing and says so.

Guarantee: it never removes a file Spark reads (a log entry, state, metadata), and nothing at all
once the offset log holds an entry.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import List, Optional
from urllib.parse import urlparse

from barrier_sink.options import normalize_location

logger = logging.getLogger(__name__)

#: The logs whose leftover temporary files Spark's first-start check counts.
LOG_FOLDERS = ("offsets", "commits")


def local_folder(checkpoint_location: str) -> Optional[str]:
    """The local path of ``checkpoint_location`` (a path or a ``file:`` URI), None for a URI of
    another file system (``s3a://``, ``dbfs:/``, ``hdfs://``)."""
    if urlparse(checkpoint_location).scheme not in ("", "file"):
        return None
    return normalize_location(checkpoint_location)


def is_temporary(name: str) -> bool:
    """A file name Spark's checkpoint file manager writes before the rename (and its checksum):
    hidden, with a ``.tmp`` part."""
    return name.startswith(".") and (name.endswith(".tmp") or name.endswith(".tmp.crc"))


def dead_first_writes(checkpoint_location: str) -> List[str]:
    """Paths of the temporary files a crashed first batch left in the offset and commit logs of
    ``checkpoint_location``; empty when the offset log holds an entry (Spark then resumes and
    checks nothing), when there is none, or for a non-local location. Runs on the driver."""
    root = local_folder(checkpoint_location)
    if root is None:
        return []
    offsets = os.path.join(root, "offsets")
    if any(not is_temporary(n) for n in _names(offsets)):
        return []  # a batch was planned: Spark resumes from it
    return [os.path.join(root, folder, n) for folder in LOG_FOLDERS
            for n in sorted(_names(os.path.join(root, folder))) if is_temporary(n)]


def clear_dead_first_writes(checkpoint_location: str) -> List[str]:
    """Remove :func:`dead_first_writes` (driver, before the query starts); returns what it
    removed, each named in a warning. A non-local location is left alone (logged at debug)."""
    if local_folder(checkpoint_location) is None:
        logger.debug("checkpoint location %s is not a local folder: its dead first writes are "
                     "not looked for", checkpoint_location)
        return []
    removed = []
    for path in dead_first_writes(checkpoint_location):
        try:
            os.remove(path)
        except FileNotFoundError:
            continue
        removed.append(path)
        logger.warning("removed %s: a temporary file of Spark's log that a crash in the query's "
                       "first batch left behind (Spark 4.1+ would refuse to start the query "
                       "with STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY)", path)
    return removed


def _names(folder: str) -> List[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m barrier_kafka.spark_checkpoint",
        description="List (and with --remove delete) the temporary files of Spark's offset and "
                    "commit logs that a crash in a query's first batch left behind, which make "
                    "Spark 4.1+ refuse to start it (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY).")
    parser.add_argument("checkpoint_location", help="the query's checkpointLocation")
    parser.add_argument("--remove", action="store_true", help="delete them")
    args = parser.parse_args(argv)
    if local_folder(args.checkpoint_location) is None:
        print(f"{args.checkpoint_location} is not a local folder: list its offsets/ folder with "
              "its file system's tools; hidden '.<n>.<uuid>.tmp' files there are safe to delete "
              "while the folder holds no other file", file=sys.stderr)
        return 2
    found = (clear_dead_first_writes if args.remove else dead_first_writes)(
        args.checkpoint_location)
    for path in found:
        print(("removed " if args.remove else "") + path)
    if not found:
        print("none", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
