"""The sink and the barrier-kafka source upstream share one checkpoint storage (driver commit
worker).

The source decides when checkpoints trigger and, with ``checkpoint.storage``, commits consumer-group
offsets only for checkpoints the sink's coordinator completed in that storage. Without it (or with
another storage than the sink's) the source falls back to source-only mode and commits group offsets
when Spark commits a batch, ahead of checkpoints that may still fail, and the sink's
transaction-timeout guard cannot see the checkpoint interval. The source records its settings in
``<checkpoint.storage>/_checkpointing.json`` when it starts
(:mod:`barrier_source.checkpoint_settings`), so a sink that receives barriers can tell.

Guarantee: the first batch carrying barriers into a sink whose storage holds no source settings
fails in ``writer.commit`` before anything is committed (Spark then aborts its transactions and
the source commits no offsets for it), with an error naming the option to set.
"""

from __future__ import annotations

from barrier_sink.exceptions import CheckpointStorageMismatchError
from barrier_source.checkpoint_settings import SETTINGS_FILE

_confirmed: set = set()  # storage URIs already seen to hold the source's settings (per worker)


def require_source_settings(backend, storage_uri: str) -> None:
    """Raise :class:`CheckpointStorageMismatchError` unless the barrier-kafka source upstream
    records its checkpoint settings in this sink's storage (driver commit worker; one
    ``exists`` per process and storage)."""
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
