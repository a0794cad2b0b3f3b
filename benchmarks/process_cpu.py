"""CPU time of the processes a benchmark run uses, by kind, from Linux's ``/proc`` (not a test).

``bench_pipeline.py`` compares pipelines on the same few cores, where one pipeline's extra work
in one process shows up as everyone's wall time. This says which processes spent the CPU:

* ``spark jvm``: the Spark driver JVM (in ``local[*]`` also the executor: tasks, shuffle,
  Spark's Kafka client, state stores, codegen and the JIT compiler);
* ``python tasks``: PySpark's Python task workers (``pyspark.daemon pyspark.worker``: the
  barrier-kafka reader, the keyed operator, the sink's writer);
* ``python driver``: PySpark's driver-side Python workers (the streaming source's planner, the
  sink's commit worker, the short-lived planning workers);
* ``kafka broker``: the harness's broker; ``benchmark``: this process (the query's driver
  Python and the run's own visibility polling).

Of the Spark JVM's time, :data:`JIT` is the part its just-in-time compiler threads (HotSpot's
``C1 CompilerThread<n>`` / ``C2 CompilerThread<n>``, from ``/proc/<pid>/task``) spent: on a
2-core machine they keep about one core busy for the first minutes of a session, whichever
pipeline runs, so a short run's ratio moves with how far the JIT got (a part of ``spark jvm``,
not added to the total). A compiler thread that ended between two snapshots (HotSpot stops
idle ones) takes its time out of this part, not out of ``spark jvm``.

A process that ended during the run is counted through its parent (the CPU of children it
waited for), minus what the first snapshot had already counted for it; that part comes off the
parent's kind, which the children time lands in (a source planner the Spark JVM waited for: its
time after the first snapshot shows as the JVM's, never as a negative Python figure). When the
parent ended too (a driver-side daemon and its forked worker), it comes off the nearest ancestor
still running, where both parts landed. An ended process whose running ancestor is of no
interest counts nowhere: that ancestor's children time is not read. One that ended but was not
waited for yet (a zombie, :data:`ZOMBIE`) takes nothing off anyone: its time is in no children
time yet (its time in the run is then missing, not counted twice).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional

#: The kind :func:`take` gives a process that ended and was not waited for yet.
ZOMBIE = "zombie"
KINDS = ("spark jvm", "python tasks", "python driver", "kafka broker", "benchmark")
#: The part of ``spark jvm`` its JIT compiler threads spent (:func:`jit_spent`).
JIT = "jvm jit"
#: The command names (``comm``, at most 15 characters) of HotSpot's JIT compiler threads.
_JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


@dataclass(frozen=True)
class Usage:
    """One process's CPU seconds: its own and its waited-for children's."""

    kind: str
    own_s: float
    children_s: float
    parent: Optional[int] = None
    #: The CPU seconds of each JIT compiler thread (thread id -> seconds); a JVM's only.
    jit_threads: Optional[Dict[int, float]] = None


def kind_of(cmdline: str, pid: int, benchmark_pid: int) -> Optional[str]:
    """The kind of a process from its command line, or None for processes of no interest."""
    if pid == benchmark_pid:
        return "benchmark"
    if "org.apache.spark.deploy.SparkSubmit" in cmdline:
        return "spark jvm"
    if "kafka.Kafka" in cmdline:
        return "kafka broker"
    if "pyspark.daemon" in cmdline:
        return "python tasks" if cmdline.rstrip().endswith("pyspark.worker") else "python driver"
    if "pyspark.sql.streaming.python_streaming_source_runner" in cmdline:
        return "python driver"
    return None


def take(benchmark_pid: Optional[int] = None) -> Dict[int, Usage]:
    """CPU seconds of every process of interest now (empty where ``/proc`` is missing)."""
    me = os.getpid() if benchmark_pid is None else benchmark_pid
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: Dict[int, Usage] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            fields = _stat_fields(f"/proc/{pid}/stat")
        except OSError:
            continue  # ended while listed
        kind = ZOMBIE if fields[0] == "Z" else kind_of(cmdline, pid, me)
        if kind is None:
            continue
        own = _own_seconds(fields, tick)
        children = (int(fields[13]) + int(fields[14])) / tick
        jit = _jit_threads(pid, tick) if kind == "spark jvm" else None
        out[pid] = Usage(kind, own, children, int(fields[1]), jit)
    return out


def _jit_threads(pid: int, tick: int) -> Dict[int, float]:
    """CPU seconds of each JIT compiler thread of JVM ``pid`` (empty where none is listed)."""
    threads: Dict[int, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return threads
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if not f.read().startswith(_JIT_THREADS):
                    continue
            fields = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue  # the thread ended while listed
        threads[int(tid)] = _own_seconds(fields, tick)
    return threads


def _stat_fields(path: str) -> List[str]:
    """The fields of a ``/proc`` ``stat`` file after the command name: state is field 0, ppid
    1, utime 11, stime 12, cutime 13, cstime 14."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def _own_seconds(fields: List[str], tick: int) -> float:
    """A process's or thread's own CPU seconds (user and system) from its :func:`_stat_fields`."""
    return (int(fields[11]) + int(fields[12])) / tick


def spent(before: Dict[int, Usage], after: Dict[int, Usage]) -> Dict[str, float]:
    """CPU seconds per kind between two snapshots of :func:`take`."""
    total = {k: 0.0 for k in KINDS}
    for pid, now in after.items():
        if now.kind == ZOMBIE:
            continue
        then = before.get(pid)
        if then is not None and then.kind != now.kind:
            then = None  # a reused pid: a new process
        total[now.kind] += now.own_s - (then.own_s if then else 0.0)
        total[now.kind] += now.children_s - (then.children_s if then else 0.0)
    for pid, then in before.items():
        now = after.get(pid)
        if now is not None and now.kind in (then.kind, ZOMBIE):
            continue   # still running, or ended and not waited for: in no children time yet
        # ended: the children time of the ancestor still running holds all of it
        ancestor = _running_ancestor(then, before, after)
        if ancestor is not None:
            total[ancestor.kind] -= then.own_s + then.children_s
    return total


def jit_spent(before: Dict[int, Usage], after: Dict[int, Usage]) -> float:
    """CPU seconds the Spark JVMs' JIT compiler threads spent between two snapshots of
    :func:`take` (:data:`JIT`, a part of :func:`spent`'s ``spark jvm``): each thread the second
    lists, less what the first had counted for it."""
    total = 0.0
    for pid, now in after.items():
        then = before.get(pid)
        earlier = (then.jit_threads if then is not None and then.kind == now.kind else None) or {}
        for tid, seconds in (now.jit_threads or {}).items():
            counted = earlier.get(tid, 0.0)
            # a figure below the earlier one is a new thread that reused the id
            total += seconds - counted if seconds >= counted else seconds
    return total


def _running_ancestor(usage: Usage, before: Dict[int, Usage],
                      after: Dict[int, Usage]) -> Optional[Usage]:
    """The nearest ancestor of an ended process that both snapshots hold as the same running
    process, or None (an ancestor of no interest, or none known)."""
    seen = set()
    parent = usage.parent
    while parent is not None and parent not in seen:
        seen.add(parent)
        then, now = before.get(parent), after.get(parent)
        if then is None:
            return None
        if now is not None and now.kind == then.kind != ZOMBIE:
            return now
        parent = then.parent
    return None
