"""The machine's processes as Linux's ``/proc`` shows them (tests and the harness): whose child a
process is, what it runs, and killing a process with every descendant at once, as a machine
loss would."""

from __future__ import annotations

import os
import signal
from typing import Dict, List, Optional


def parent_pid(pid: int) -> Optional[int]:
    """The parent of ``pid``; None once it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def command_line(pid: int) -> str:
    """What ``pid`` runs, its arguments joined by spaces ('' once it has exited)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def children_by_parent() -> Dict[int, List[int]]:
    """Every running process, by its parent's pid."""
    out: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = parent_pid(int(entry))
            if ppid is not None:
                out.setdefault(ppid, []).append(int(entry))
    return out


def kill_process_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every descendant at once, as a machine loss would (PySpark's worker
    daemon runs in its own process group, so a group kill alone would leave its workers)."""
    children, tree, todo = children_by_parent(), [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
