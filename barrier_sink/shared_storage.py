"""The sink, the barrier-kafka source upstream and the keyed operators share one checkpoint
storage (driver commit worker).

The source decides when checkpoints trigger and, with ``checkpoint.storage``, commits consumer-group
offsets only for checkpoints the sink's coordinator completed in that storage. Without it (or with
another storage than the sink's) the source falls back to source-only mode and commits group offsets
when Spark commits a batch, ahead of checkpoints that may still fail, and the sink's
transaction-timeout guard cannot see the checkpoint interval. The source records its settings in
``<checkpoint.storage>/_checkpointing.json`` when it starts
(:mod:`barrier_core.checkpoint_settings`), so a sink that receives barriers can tell.

An operator whose ``state_backend`` is another storage writes snapshots that the sink's
``chk-n/_metadata`` cannot point at: restoring from that checkpoint would fail. Acks name the
storage their snapshot went to (:class:`barrier_core.ack.Acknowledgement`).

Guarantee: the first batch carrying barriers or acks that disagree with the sink's storage fails
in ``writer.commit`` before anything is recorded or committed (Spark then aborts its
transactions and the source commits no offsets for it), with an error naming the option to set.
"""

from __future__ import annotations

from typing import Iterable

from barrier_core.ack import Acknowledgement
from barrier_core.checkpoint_settings import SETTINGS_FILE
from barrier_sink.exceptions import CheckpointStorageMismatchError
from barrier_sink.messages import SinkCommitMessage

_confirmed: set = set()  # storage URIs already seen to hold the source's settings (per worker)


def require_shared_storage(backend, storage_uri: str,
                           messages: Iterable[SinkCommitMessage]) -> None:
    """Raise :class:`CheckpointStorageMismatchError` unless the source that injected the batch's
    barriers and the operators that acked in it use this sink's checkpoint storage (driver
    commit worker; one ``exists`` per process and storage, one JSON parse per ack)."""
    messages = list(messages)
    if any(m.barriers for m in messages):
        _require_source_settings(backend, storage_uri)
    mine = _same_place(backend.describe())
    for m in messages:
        for raw in m.acks:
            ack = Acknowledgement.from_json(raw)
            if ack.storage is not None and _same_place(ack.storage) != mine:
                raise CheckpointStorageMismatchError(
                    f"Operator {ack.operator_id!r} writes its snapshots to {ack.storage}, but "
                    f"this sink completes checkpoints in {backend.describe()}: a completed "
                    f"checkpoint could not be restored. Give keyed_process "
                    f"state_backend='{storage_uri}' (the sink's checkpoint.storage), or give "
                    f"the sink that storage. Nothing of this batch was committed.")


def _same_place(described: str) -> str:
    return described.rstrip("/")


def _require_source_settings(backend, storage_uri: str) -> None:
    if storage_uri in _confirmed:
        return
    if not backend.exists(SETTINGS_FILE):
        raise CheckpointStorageMismatchError(
            f"The input carries checkpoint barriers, but the source that injects them records "
            f"no checkpoint settings in this sink's checkpoint storage {backend.describe()}. "
            f"The source and the sink must share one checkpoint.storage: give the barrier-kafka "
            f"source .option('checkpoint.storage', '{storage_uri}') (or give both the same "
            f"explicit 'checkpoint.storage'). Without it the source commits consumer-group "
            f"offsets before checkpoints complete. Nothing of this batch was committed; restart "
            f"the query after fixing the option.")
    _confirmed.add(storage_uri)
