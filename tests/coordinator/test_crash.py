"""A real crash: the process is SIGKILLed between writing checkpoint 2's snapshots and its
``_metadata``. The half-written checkpoint is never listed as complete nor restored; a replay
of the acknowledgements completes it properly."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid

import pytest

from barrier_coordinator import CheckpointCoordinator, CoordinatorConfig, ManualClock
from state_backends.checkpoint_store import CompletedCheckpointStore
from state_backends.registry import backend_from_uri
from tests.coordinator.crash_worker import run_checkpoint, state

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(params=["filesystem", "s3"])
def location(request, tmp_path):
    if request.param == "filesystem":
        return f"file://{tmp_path}/chk", {}
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return (f"s3://{bucket}/crash-{uuid.uuid4().hex[:6]}",
            {"s3.endpoint": server.endpoint_url, "s3.access.key": server.access_key,
             "s3.secret.key": server.secret_key, "s3.region": server.region})


def read_line(proc, timeout_s: float) -> str:
    """Next stdout line of ``proc``, waiting at most ``timeout_s`` (no fixed sleeps)."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    while not buf.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or proc.poll() is not None and not buf:
            break
        ready, _, _ = select.select([proc.stdout], [], [], remaining)
        if not ready:
            break
        chunk = os.read(proc.stdout.fileno(), 1)
        if not chunk:
            break
        buf += chunk
    return buf.decode().strip()


def test_sigkill_between_snapshots_and_metadata(location):
    uri, options = location
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.coordinator.crash_worker", uri, json.dumps(options)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = read_line(proc, timeout_s=120)
        if line != "READY-TO-WRITE-METADATA":
            proc.kill()
            pytest.fail(f"worker did not reach the crash point: {line!r}; stderr: "
                        f"{proc.stderr.read().decode()[-2000:]}")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    backend = backend_from_uri(uri, options)
    store = CompletedCheckpointStore(backend, num_retained=3)
    # The crash really happened after the snapshots: checkpoint 2's blobs are all there ...
    assert [p for p in backend.list("chk-2") if "/op-" in p] == [
        f"chk-2/op-agg/kg-{k}" for k in range(3)]
    # ... yet it is never complete, and restore picks checkpoint 1.
    assert store.completed_ids() == [1]
    assert store.incomplete_ids() == [2]
    point = store.restore()
    assert point.checkpoint_id == 1 and point.skipped == ()
    assert point.source_offsets == {"t": {"0": 10, "1": 11, "2": 12}}
    assert store.load_state(point.metadata) == {"agg": {k: state(1, k) for k in range(3)}}

    # The next commit worker loads the pending state: 2 is still only pending.
    coordinator = CheckpointCoordinator(backend, CoordinatorConfig(num_retained=3),
                                        ManualClock(start_ms=0))
    assert coordinator.last_completed_id == 1
    assert 2 in coordinator.pending_checkpoints()
    # Spark replays the batch: the same snapshots and acks arrive again; 2 completes for real.
    run_checkpoint(coordinator, backend, 2)
    assert store.completed_ids() == [1, 2]
    restored = store.restore()
    assert restored.checkpoint_id == 2
    assert store.load_state(restored.metadata) == {"agg": {k: state(2, k) for k in range(3)}}
