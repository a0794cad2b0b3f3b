"""Crash injection for the exactly-once tests: kill the whole pipeline at a named protocol step.

Set ``BARRIER_KAFKA_CRASH_AT=<point>[:<occurrence>]`` and ``BARRIER_KAFKA_CRASH_DIR=<dir>`` in the
environment of a pipeline process started in its own session (process group), which records
its group id in ``BARRIER_KAFKA_CRASH_PGID`` before starting Spark (:func:`record_pipeline_group`). The
``<occurrence>``-th time any Spark Python worker (executor or driver side) reaches ``point``, it
SIGKILLs the whole process group: driver JVM, driver Python and every worker, as a machine loss
would. A marker file in the crash dir makes each crash happen once, so the restarted pipeline
runs through. Without the variables this is a no-op costing one dict lookup.

Points (in protocol order): ``task_write`` (a sink task mid-write), ``after_precommit`` (a task
pre-committed but did not return), ``commit_before_record`` (driver commit received messages),
``commit_before_metadata`` (acks recorded, checkpoint metadata not written),
``commit_after_metadata`` (checkpoint complete, no transaction committed),
``commit_mid_transactions`` (some of a checkpoint's transactions committed),
``before_offset_commit`` (batch committed by Spark, consumer-group offsets not yet committed),
``operator_mid_alignment`` (an operator holds back records, barrier not yet aligned).
"""

from __future__ import annotations

import os
import signal

POINTS = ("task_write", "after_precommit", "commit_before_record", "commit_before_metadata",
          "commit_after_metadata", "commit_mid_transactions", "before_offset_commit",
          "operator_mid_alignment")


def maybe_crash(point: str) -> None:
    """SIGKILL the pipeline's process group if ``point`` is the configured crash point."""
    spec = os.environ.get("BARRIER_KAFKA_CRASH_AT")
    if not spec:
        return
    name, _, occurrence = spec.partition(":")
    if name != point:
        return
    crash_dir = os.environ.get("BARRIER_KAFKA_CRASH_DIR")
    if not crash_dir:
        return
    os.makedirs(crash_dir, exist_ok=True)
    if os.path.exists(os.path.join(crash_dir, "crashed")):
        return
    # Count arrivals across processes with O_EXCL files: the n-th arrival crashes.
    wanted = int(occurrence or 1)
    for i in range(1, wanted + 1):
        try:
            fd = os.open(os.path.join(crash_dir, f"{point}.{i}"), os.O_CREAT | os.O_EXCL)
            os.close(fd)
        except FileExistsError:
            continue
        if i < wanted:
            return
        with open(os.path.join(crash_dir, "crashed"), "w") as f:
            f.write(point)
            f.flush()
            os.fsync(f.fileno())
        # PySpark's worker daemon runs in its own process group: kill the pipeline's group
        # (recorded by the pipeline process in BARRIER_KAFKA_CRASH_PGID) first, then ours.
        target = os.environ.get("BARRIER_KAFKA_CRASH_PGID")
        if target:
            try:
                os.killpg(int(target), signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.killpg(os.getpgid(0), signal.SIGKILL)
        os._exit(137)  # not reached unless killpg was refused
    return


class InjectedFailure(RuntimeError):
    """Raised by :func:`maybe_fail`: a deliberate task failure of the tests."""


def maybe_fail(point: str) -> None:
    """Raise :class:`InjectedFailure` once when ``BARRIER_KAFKA_FAIL_AT=<point>`` (abort-path
    tests: a failing task makes Spark abort the batch; nothing it wrote may become visible)."""
    if os.environ.get("BARRIER_KAFKA_FAIL_AT") != point:
        return
    crash_dir = os.environ.get("BARRIER_KAFKA_CRASH_DIR")
    if not crash_dir:
        return
    os.makedirs(crash_dir, exist_ok=True)
    try:
        fd = os.open(os.path.join(crash_dir, f"failed-{point}"), os.O_CREAT | os.O_EXCL)
        os.close(fd)
    except FileExistsError:
        return
    raise InjectedFailure(f"injected failure at {point}")


def record_pipeline_group() -> None:
    """Call in the pipeline's driver process before Spark starts: crash points then kill this
    whole process group (the JVM and its Python workers inherit the variable)."""
    if os.environ.get("BARRIER_KAFKA_CRASH_AT"):
        os.environ["BARRIER_KAFKA_CRASH_PGID"] = str(os.getpgid(0))
