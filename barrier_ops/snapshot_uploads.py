"""The asynchronous part of the keyed operator's snapshots: uploads run concurrently (executor).

A key group's checkpoint has two parts, as in Flink: the synchronous part serialises its state
(:meth:`~barrier_ops.runtime.KeyGroupRuntime._checkpoint`), the asynchronous part stores the blob
in the state backend. Writing the blobs of a call's key groups one after another costs one
backend round trip each (a PUT on S3, two fsyncs on a local disk) on the task's critical path;
with ``parallelism`` one call runs many key groups, so their uploads run together on a small
thread pool of the Python worker (:data:`UPLOAD_THREADS`) while the call goes on with the next key
group. Each blob is stored with ``put_deferred``, and :meth:`SnapshotUploads.finish` makes them
durable together (``make_durable``): on a local disk each file is synced as it is written and
each folder once for the call, not once a key group (64 folder syncs a call at the default
``max_parallelism`` over two tasks).

What it guarantees: a key group's acknowledgement (the row that lets the coordinator complete
the checkpoint) is emitted only after its snapshot is durable: :meth:`SnapshotUploads.finish`
waits for every upload of the call and raises the first failure, so the task fails and emits
nothing (as a failed synchronous write did). A call that fails waits for the uploads it started
before its error propagates, so no blob of a failed attempt lands after its retry wrote the same
path. The snapshot's handle is known before its upload (its path and size), so the runtime's
state for the next batch (incremental chains included) does not wait for the upload. A backend
keeping snapshots inline has nothing to upload.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

from barrier_core.ack import Acknowledgement
from barrier_core.faults import FaultPoint, fault_point
from barrier_core.schema import KIND_ACK

#: Concurrent uploads per Python worker.
UPLOAD_THREADS = 8

_pool_lock = threading.Lock()
_pool: Optional[ThreadPoolExecutor] = None


def _upload_pool() -> ThreadPoolExecutor:
    """The worker's upload threads, started on first use (never in PySpark's daemon, which
    forks workers: the operator's code runs only in the forked workers)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=UPLOAD_THREADS,
                                       thread_name_prefix="barrier-snapshot-upload")
        return _pool


def _timed_put(backend, path: str, blob: bytes) -> float:
    started = time.perf_counter()
    backend.put_deferred(path, blob)
    return (time.perf_counter() - started) * 1000.0


def _make_durable(pending: List["PendingAck"]) -> None:
    """:meth:`~state_backends.base.StateBackend.make_durable` of every blob ``pending`` stored,
    once a backend (a local disk syncs each folder once, not once a key group)."""
    paths: dict = {}
    for p in pending:
        if p.upload is not None:
            paths.setdefault(p.backend, []).append(p.path)
    for backend, written in paths.items():
        backend.make_durable(written)


def _wait_all(pending: List["PendingAck"]
              ) -> Tuple[List[Optional[float]], Optional[BaseException]]:
    """Wait for every upload of ``pending``; their ms (0 for nothing to upload, None for a
    failed one) and the first failure, raised by none."""
    upload_ms: List[Optional[float]] = []
    first_error = None
    for p in pending:
        try:
            upload_ms.append(0.0 if p.upload is None else p.upload.result())
        except BaseException as exc:  # noqa: BLE001 - the caller decides what to raise
            first_error = first_error or exc
            upload_ms.append(None)
    return upload_ms, first_error


@dataclass
class PendingAck:
    """A key group's acknowledgement waiting for its snapshot's upload; ``ack`` has every field
    but the upload time (``metrics.async_ms``). ``upload``: the running upload, None before it
    starts or without one (``path`` None: an inline snapshot); ``blob``: the bytes of an upload
    not started yet."""

    ack: Acknowledgement
    topic: str
    upload: Optional[Future]
    backend: object = None
    path: Optional[str] = None
    blob: Optional[bytes] = None

    def begin(self) -> None:
        """Start the upload if it waits for the call's end (a local disk's)."""
        if self.blob is not None:
            self.upload = _upload_pool().submit(_timed_put, self.backend, self.path, self.blob)
            self.blob = None


class SnapshotUploads:
    """The snapshot uploads of one operator call and their acknowledgements (executor)."""

    def __init__(self) -> None:
        self._pending: List[PendingAck] = []

    def start(self, backend, handle, blob: bytes, ack: Acknowledgement, topic: str) -> None:
        """Store ``blob`` at ``handle.path`` in the background (nothing for an inline handle):
        now, or with a backend whose ``overlap_uploads`` is False from :meth:`finish` on.
        ``ack`` is emitted by :meth:`finish` once the blob is durable."""
        pending = PendingAck(ack, topic, None, backend, handle.path)
        if handle.path is not None:
            pending.blob = blob
            if getattr(backend, "overlap_uploads", True):
                pending.begin()
        self._pending.append(pending)

    def finish(self, out) -> None:
        """Wait for every upload, make the blobs durable
        (:meth:`~state_backends.base.StateBackend.make_durable`), then add each
        acknowledgement to ``out`` (:class:`~barrier_ops.output_rows.OutputRows`) as a control
        row, in the order the snapshots were taken. Raises the first upload's error after all
        have ended, or the error of making them durable, emitting no acknowledgement."""
        pending, self._pending = self._pending, []
        for p in pending:
            p.begin()
        upload_ms, first_error = _wait_all(pending)
        if first_error is not None:
            raise first_error
        _make_durable(pending)
        if pending:  # a storage failure after the blobs landed, before any acknowledgement
            fault_point(FaultPoint.OPERATOR_SNAPSHOT)
        for p, ms in zip(pending, upload_ms):
            ack = replace(p.ack, metrics=replace(p.ack.metrics, async_ms=round(ms, 3)))
            out.add_control(kind=KIND_ACK, checkpoint_id=int(ack.checkpoint_id), topic=p.topic,
                            partition=int(ack.key_group), ack=ack.to_json())

    def __len__(self) -> int:
        return len(self._pending)

    def __enter__(self) -> "SnapshotUploads":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abandon()

    def abandon(self) -> None:
        """The call failed: wait for the uploads it started, so that none lands after the
        failure (a retried task writes the same paths); their results are dropped. Uploads
        that were to start at the call's end never start."""
        pending, self._pending = self._pending, []
        _wait_all(pending)
