"""Fault injection for the exactly-once tests: kill the pipeline, or raise, at a named protocol
step. Test-only: it does nothing unless one explicit switch is on.

Runs wherever the protocol step runs (executor tasks, the driver's commit worker, the driver's
planner worker). Every hook is :func:`fault_point` with a :class:`FaultPoint`; the tests import
the enum, so a misspelt point fails the test instead of silently never firing.

Environment of a pipeline process (its Spark workers inherit it):

``BARRIER_KAFKA_TEST_FAULTS=1``
    The switch. Without it every hook returns at once (one ``os.environ`` lookup), whatever the
    other variables say: a production job that happens to carry them never fires a fault.
``BARRIER_KAFKA_CRASH_AT=<point>[:<n>]``
    The n-th arrival (default 1) at ``point`` in any process SIGKILLs the whole pipeline
    process group (driver JVM, driver Python, every worker), as a machine loss would. The
    pipeline records its group in ``BARRIER_KAFKA_CRASH_PGID`` (:func:`record_pipeline_group`).
``BARRIER_KAFKA_FAIL_AT=<point>[:<n>]``
    The n-th arrival raises :class:`InjectedFailure` there instead (an exception from the broker
    or the storage, a failing task): Spark then aborts the batch or fails the query.
``BARRIER_KAFKA_DELAY_AT=<point>:<n>:<seconds>``
    The n-th arrival at ``point`` sleeps that long once (a slow task attempt: Spark launches a
    speculative copy of it on a cluster with ``spark.speculation``).
``BARRIER_KAFKA_FAULT_FIRST_ATTEMPTS=1``
    In Spark tasks only first attempts (attempt number 0) count and fire: a retry or a
    speculative copy passes through. Each armed arrival is then a task of its own, so a test
    that fails one task and slows another knows which attempts won (a cluster with
    ``spark.speculation`` launches copies of healthy tasks too).
``BARRIER_KAFKA_CRASH_DIR=<dir>``
    Where arrivals are counted across processes (``O_EXCL`` marker files) and where the
    ``crashed`` / ``failed-<point>`` / ``delayed-<point>`` marker is written, so that each fault
    fires once and the restarted pipeline runs through. A marker holds the point, the process
    and, in a Spark task, the task it fired in (:func:`fired`).
"""

from __future__ import annotations

import enum
import json
import os
import signal
import time
from typing import Optional, Tuple

SWITCH = "BARRIER_KAFKA_TEST_FAULTS"
CRASH_AT = "BARRIER_KAFKA_CRASH_AT"
FAIL_AT = "BARRIER_KAFKA_FAIL_AT"
DELAY_AT = "BARRIER_KAFKA_DELAY_AT"
CRASH_DIR = "BARRIER_KAFKA_CRASH_DIR"
CRASH_PGID = "BARRIER_KAFKA_CRASH_PGID"
FIRST_ATTEMPTS = "BARRIER_KAFKA_FAULT_FIRST_ATTEMPTS"


class FaultPoint(str, enum.Enum):
    """The protocol steps a fault can be injected at, in protocol order."""

    OPERATOR_SNAPSHOT = "operator_snapshot"      # a keyed operator call's snapshots are
    #                                              durable, their acknowledgements not emitted
    OPERATOR_RUNTIME = "operator_runtime"        # runtime_store="backend": a call stored its
    #                                              runtime for the batch, returned no rows
    TASK_OPEN = "task_open"                      # a sink task is about to open a transaction
    TASK_WRITE = "task_write"                    # a sink task wrote its rows, before pre-commit
    AFTER_PRECOMMIT = "after_precommit"          # a task pre-committed but did not return
    COMMIT_BEFORE_RECORD = "commit_before_record"  # driver commit received the messages
    COMMIT_BEFORE_METADATA = "commit_before_metadata"  # acks in, _metadata not yet written
    COMMIT_AFTER_METADATA = "commit_after_metadata"  # checkpoint complete, nothing committed
    COMMIT_MID_TRANSACTIONS = "commit_mid_transactions"  # some transactions committed
    AFTER_TRANSACTIONS = "after_transactions"    # all committed, hand-off/prune not done
    BEFORE_OFFSET_COMMIT = "before_offset_commit"  # group offsets not yet committed


#: Point names, in protocol order (command-line help, docs).
POINTS = tuple(p.value for p in FaultPoint)


class InjectedFailure(RuntimeError):
    """Raised by a :class:`FaultPoint` armed with ``BARRIER_KAFKA_FAIL_AT``."""


def enabled() -> bool:
    return os.environ.get(SWITCH) == "1"


def _armed(variable: str, point: FaultPoint) -> Optional[Tuple[int, str]]:
    """``(occurrence, crash_dir)`` when ``variable`` arms ``point``."""
    spec = os.environ.get(variable)
    if not spec:
        return None
    name, _, occurrence = spec.partition(":")
    occurrence = occurrence.partition(":")[0]
    if name not in POINTS:
        raise ValueError(f"{variable}={spec!r}: unknown fault point {name!r}; one of {POINTS}")
    crash_dir = os.environ.get(CRASH_DIR)
    if name != point.value or not crash_dir:
        return None
    return int(occurrence or 1), crash_dir


def _nth_arrival(crash_dir: str, tag: str, wanted: int) -> bool:
    """Count this arrival across processes; True exactly once, at the ``wanted``-th."""
    os.makedirs(crash_dir, exist_ok=True)
    for i in range(1, wanted + 1):
        try:
            os.close(os.open(os.path.join(crash_dir, f"{tag}.{i}"), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue
        return i == wanted
    return False


def _spark_task() -> Optional[dict]:
    """The running Spark task (executor): its micro-batch (None outside a stream), partition,
    attempt number and Spark's task attempt id (unique in the application, where the attempt
    number starts again at 0 when Spark re-runs a stage); None outside a task (the driver, a
    unit test)."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    ctx = TaskContext.get()
    if ctx is None:
        return None
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return {"batch": None if batch is None else int(batch), "partition": ctx.partitionId(),
            "attempt": ctx.attemptNumber(), "task_attempt_id": ctx.taskAttemptId()}


def _mark(path: str, point: FaultPoint, task: Optional[dict]) -> None:
    with open(path, "w") as f:
        json.dump({"point": point.value, "task": task, "pid": os.getpid()}, f)
        f.flush()
        os.fsync(f.fileno())


def fired(crash_dir: str, marker: str) -> dict:
    """What a marker (``crashed``, ``failed-<point>``, ``delayed-<point>``) records: ``point``,
    ``task`` (``batch``, ``partition``, ``attempt``, ``task_attempt_id``; None when it fired
    outside a task) and ``pid``, the process it fired in (a test finds a task's executor)."""
    with open(os.path.join(crash_dir, marker)) as f:
        return json.load(f)


def _fires(variable: str, point: FaultPoint, tag: str) -> Optional[str]:
    """The crash dir when ``variable`` arms ``point`` and this is its armed arrival."""
    armed = _armed(variable, point)
    if armed is None:
        return None
    wanted, crash_dir = armed
    return crash_dir if _nth_arrival(crash_dir, tag, wanted) else None


def fault_point(point: FaultPoint) -> None:
    """The hook placed at each protocol step: a no-op unless the switch is on and ``point``
    is armed (see the module docstring)."""
    if os.environ.get(SWITCH) != "1":
        return
    task = _spark_task()
    if task is not None and task["attempt"] > 0 and os.environ.get(FIRST_ATTEMPTS) == "1":
        return
    crash_dir = os.environ.get(CRASH_DIR, "")
    if not os.path.exists(os.path.join(crash_dir, "crashed")) and \
            _fires(CRASH_AT, point, point.value):
        _mark(os.path.join(crash_dir, "crashed"), point, task)
        _kill_pipeline()
    if _fires(DELAY_AT, point, f"delay-{point.value}"):
        _mark(os.path.join(crash_dir, f"delayed-{point.value}"), point, task)
        time.sleep(float(os.environ[DELAY_AT].split(":")[2]))
    marker = os.path.join(crash_dir, f"failed-{point.value}")
    if not os.path.exists(marker) and _fires(FAIL_AT, point, f"fail-{point.value}"):
        _mark(marker, point, task)
        raise InjectedFailure(f"injected failure at {point.value}")


def _kill_pipeline() -> None:
    # PySpark's worker daemon runs in its own process group: kill the pipeline's group
    # (recorded by the pipeline process) first, then ours.
    target = os.environ.get(CRASH_PGID)
    if target:
        try:
            os.killpg(int(target), signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.killpg(os.getpgid(0), signal.SIGKILL)
    os._exit(137)  # not reached unless killpg was refused


def record_pipeline_group() -> None:
    """Call in the pipeline's driver process before Spark starts: crash points then kill this
    whole process group (the JVM and its Python workers inherit the variable)."""
    if enabled() and os.environ.get(CRASH_AT):
        os.environ[CRASH_PGID] = str(os.getpgid(0))


def without_faults(environ) -> dict:
    """A copy of ``environ`` with no fault armed (a launcher arms what it wants on top)."""
    return {k: v for k, v in environ.items()
            if k not in (SWITCH, CRASH_AT, FAIL_AT, DELAY_AT, CRASH_PGID, FIRST_ATTEMPTS)}


def fault_env(crash_dir: str, crash_at: Optional[str] = None,
              fail_at: Optional[str] = None, delay_at: Optional[str] = None,
              first_attempts: bool = False) -> dict:
    """The environment variables that arm faults (tests and the demo)."""
    env = {SWITCH: "1", CRASH_DIR: crash_dir}
    if first_attempts:
        env[FIRST_ATTEMPTS] = "1"
    if delay_at:
        env[DELAY_AT] = delay_at
    if crash_at:
        env[CRASH_AT] = crash_at
    if fail_at:
        env[FAIL_AT] = fail_at
    return env
