"""One checkpoint storage, one query: the sink claims its ``checkpoint.storage`` (driver).

The sink's batch records (``sink/batch-<N>.json``) are keyed by Spark's batch id, which every new
query starts again at 0. A second query writing into the same storage would read the first
query's records as an earlier attempt of its own batches and abort its output as duplicates:
data loss. So the first query to use a storage writes ``_owner.json`` naming its
``checkpointLocation``, and any other query is refused with an error that says what to do.
"""

from __future__ import annotations

import json
import logging

from barrier_sink.exceptions import SinkError
from barrier_sink.options import normalize_location

logger = logging.getLogger(__name__)

OWNER_FILE = "_owner.json"


class StorageOwnedByAnotherQueryError(SinkError):
    """``checkpoint.storage`` belongs to the query with another ``checkpointLocation``."""


def claim_storage(backend, checkpoint_location: str) -> None:
    """Record that the query at ``checkpoint_location`` owns ``backend``, or refuse if another
    query does. Idempotent for the owner (every restart of the same query passes)."""
    mine = normalize_location(checkpoint_location)
    recorded = backend.get_if_exists(OWNER_FILE)
    if recorded is not None:
        owner = json.loads(recorded).get("checkpointLocation")
        if owner != mine:
            raise StorageOwnedByAnotherQueryError(
                f"checkpoint.storage {backend.describe()} belongs to the query whose "
                f"checkpointLocation is {owner!r}; this query's is {mine!r}. Two queries must "
                "not share a checkpoint storage (their batch records would collide and output "
                "would be lost). Give this query its own checkpoint.storage; to start it from a "
                "checkpoint or savepoint of the other query, copy that into the new storage "
                "(CompletedCheckpointStore.copy_savepoint, or create_savepoint(target=...)) and "
                "set execution.savepoint.path on the source and restore_from on the operators.")
        return
    backend.put(OWNER_FILE, json.dumps({"checkpointLocation": mine}).encode())
    logger.info("checkpoint storage %s claimed by the query at %s", backend.describe(), mine)
