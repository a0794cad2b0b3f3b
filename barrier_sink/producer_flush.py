"""Flushing a kafka-python producer whose batches the broker may split (executor).

kafka-python 3.0.x splits a batch the broker refuses as too large (MESSAGE_TOO_LARGE) on its
I/O thread: it enqueues the halves, wakes every waiter on the old batch by setting that batch's
latch, and only then removes the old batch from the accumulator's incomplete set. The old batch is
never completed. A ``flush()`` that lists the incomplete batches in that window finds the old one
woken but not done and raises ``UnknownError('Future not done')``; every ``flush()`` retried
before the I/O thread takes the GIL back raises the same. Retrying a fixed number of times lost
that race on a loaded machine (CI, issue 15).

``flush_through_splits`` guarantees: it returns only after a ``flush()`` that waited for every
batch still to be sent, halves included, has returned; it waits for a split batch to leave the
incomplete set before flushing again, up to the producer's ``delivery_timeout_ms``.
"""

from __future__ import annotations

import logging
import time

logger = logging.getLogger(__name__)

#: How long one wait for the I/O thread to finish a split lasts between checks (seconds).
_SPLIT_POLL_S = 0.002


def flush_through_splits(producer, name: str) -> None:
    """``producer.flush()`` until it returns; after each split it waits for the split batch to be
    replaced by its halves. Raises kafka-python's ``KafkaTimeoutError`` if the I/O thread never
    finishes the split within ``delivery_timeout_ms``; any other flush error propagates."""
    from kafka import errors as Errors

    deadline = time.monotonic() + producer.config.get("delivery_timeout_ms", 120_000) / 1000
    while True:
        try:
            producer.flush()
            return
        except Errors.UnknownError as exc:
            if "Future not done" not in str(exc):
                raise
        logger.info("%s: a record batch was split by the producer; flushing its halves", name)
        _await_split_batches_replaced(producer, deadline)


def _await_split_batches_replaced(producer, deadline: float) -> None:
    """Block until no incomplete batch is woken without being done (a split one the I/O thread
    has not removed yet)."""
    from kafka import errors as Errors

    accumulator = producer._accumulator
    while any(_split_not_yet_removed(b) for b in accumulator._incomplete.all()):
        if time.monotonic() > deadline:
            raise Errors.KafkaTimeoutError(
                "the producer split a record batch the broker refused as too large but did not "
                "enqueue its halves within delivery_timeout_ms")
        time.sleep(_SPLIT_POLL_S)


def _split_not_yet_removed(batch) -> bool:
    future = batch.produce_future
    return future._latch.is_set() and not future.is_done
