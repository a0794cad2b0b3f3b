"""Child process of ``test_crash.py``: completes checkpoint 1, then writes every snapshot of
checkpoint 2 and all its acknowledgements, and blocks right before the ``chk-2/_metadata``
put, after telling the parent (a line on stdout). The parent SIGKILLs it there.

Usage: python -m tests.coordinator.crash_worker <uri> <options-json>
"""

from __future__ import annotations

import json
import sys
import threading

from barrier_coordinator import (CheckpointCoordinator, CoordinatorConfig, ManualClock,
                                 TaskAcknowledgement)
from state_backends.registry import backend_from_uri

TASKS = [f"op:agg:kg:{k}" for k in range(3)] + ["sink"]


def state(n: int, kg: int) -> bytes:
    return f"checkpoint-{n}-kg-{kg}|".encode() * 100


def run_checkpoint(coordinator, backend, n: int) -> None:
    coordinator.trigger(n, 1_000 * n, TASKS)
    for k in range(3):  # executors: snapshot, then acknowledge
        handle = backend.write_snapshot(n, "agg", k, state(n, k))
        coordinator.receive_acknowledge(n, f"op:agg:kg:{k}", TaskAcknowledgement(
            (handle,), {"t": {str(k): 10 * n + k}}))
    coordinator.receive_acknowledge(n, "sink")


def main() -> None:
    backend = backend_from_uri(sys.argv[1], json.loads(sys.argv[2]))
    real_put = backend.put

    def put(path, data):
        if path == "chk-2/_metadata":
            print("READY-TO-WRITE-METADATA", flush=True)
            threading.Event().wait()  # never returns: the parent kills us here
        return real_put(path, data)

    backend.put = put  # instance attribute: only this process's copy is instrumented
    coordinator = CheckpointCoordinator(backend, CoordinatorConfig(num_retained=3),
                                        ManualClock(start_ms=0))
    run_checkpoint(coordinator, backend, 1)
    run_checkpoint(coordinator, backend, 2)
    print("UNREACHABLE", flush=True)


if __name__ == "__main__":
    main()
