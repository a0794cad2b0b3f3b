"""The exactly-once Parquet file sink: ``df.writeStream.format("barrier-files")``.

Executors write each task's rows of one epoch to one staged Parquet file under
``<path>/_staging/`` (invisible: Spark and most readers skip ``_``-prefixed folders). When the
epoch's checkpoint completes the driver publishes each staged file under its final name
(``part-b<batch>-p<task>-e<epoch>.parquet``; a rename locally, a server-side copy on S3) and then
writes the manifest ``_manifests/chk-<n>.json`` listing the files checkpoint n published; every
10 manifests are folded into one ``_manifests/compact-<n>.json``.

Readers that follow the published set (:func:`published_files`, or ``spark.read.parquet`` on a
local path) never see a partial file; a replayed batch's duplicates are aborted (their staged
files deleted) before they are ever published.
"""

from __future__ import annotations

import io
import json
import logging
import re
from typing import Dict, List, Optional

from barrier_core.packed_source import refuse_packed
from barrier_sink.committer import SinkCommitter
from barrier_sink.file_store import FileStore, file_store_from_path
from barrier_sink.options import COMMON_SINK_OPTIONS, FILE_SINK_OPTIONS, CheckpointSinkOptions, _check_unknown, _get
from barrier_sink.two_phase_commit import TwoPhaseCommitWriter

logger = logging.getLogger(__name__)

_STAGED_RE = re.compile(r"part-b(\d+)-p\d+(?:-a\d+)?-e(?:\d+|n)\.parquet$")

#: Manifests folded into one compact manifest at a time (Spark's spark.sql.streaming.fileSink.
#: log.compactInterval is 10 too).
MANIFEST_COMPACT_INTERVAL = 10

PROTOCOL_COLUMNS = ("kind", "checkpoint_id", "ack", "barrier_channels", "checkpoint_timestamp")


class StagedFile:
    """Rows of one epoch of one task, buffered then written as one staged Parquet file."""

    def __init__(self, staged: str, final: str, checkpoint_id, batch_id, partition_id) -> None:
        self.staged, self.final = staged, final
        self.checkpoint_id, self.batch_id, self.partition_id = checkpoint_id, batch_id, partition_id
        self.rows: List[dict] = []


class FileSinkCommitter(SinkCommitter):
    def __init__(self, backend, coordinator_factory, store: FileStore) -> None:
        super().__init__(backend, coordinator_factory)
        self.store = store

    def transaction_name(self, handle: dict) -> str:
        """The staged file of the handle (driver commit worker)."""
        return handle["staged"]

    def abort_unrecorded(self, batch_id: Optional[int]) -> int:
        """Delete staged files of batches <= ``batch_id`` (None: any) that no batch record names
        as uncommitted: losing speculative or retried attempts, debris of a crashed run;
        returns how many. Runs in the driver commit worker."""
        cache: dict = {}
        deleted = 0
        for rel in self.store.list("_staging/"):
            m = _STAGED_RE.search(rel)
            if m is None:
                continue
            b = int(m.group(1))
            if batch_id is not None and b > batch_id:
                continue
            staged = "_staging/" + rel.rsplit("/", 1)[-1]
            if staged in self._pending_names(b, cache):
                continue
            logger.warning("%s: staged file of an attempt no batch record names: deleting it",
                           staged)
            self.store.delete(staged)
            deleted += 1
        return deleted

    def commit_handle(self, handle: dict) -> None:
        """Publish the staged file under its final name; idempotent (driver commit worker)."""
        self.store.publish(handle["staged"], handle["final"])

    def abort_handle(self, handle: dict) -> None:
        """Delete the staged file; idempotent (driver commit worker)."""
        self.store.delete(handle["staged"])

    def after_commit(self, checkpoint_id: int, handles: List[dict]) -> None:
        """Write ``_manifests/chk-<n>.json`` listing the files checkpoint n published, after
        they are all in place (so a manifest never names a missing file).
        Runs in the driver commit worker."""
        files = sorted(h["final"] for h in handles)
        self.store.put(f"_manifests/chk-{checkpoint_id:012d}.json",
                       json.dumps({"checkpoint_id": checkpoint_id, "files": files}).encode())
        self._compact_manifests(checkpoint_id)

    def _compact_manifests(self, checkpoint_id: int) -> None:
        """Every ``MANIFEST_COMPACT_INTERVAL`` manifests, fold them and the previous compact
        manifest into ``_manifests/compact-<n>.json`` (written first, in the same format), then
        delete what it folded, so ``_manifests/`` holds a bounded number of objects however
        many checkpoints ran (as Spark's file sink compacts its log every 10 batches). A reader
        listing in between sees both and takes the union."""
        names = self.store.list("_manifests/")
        singles = [m for m in names if m.startswith("_manifests/chk-")]
        if len(singles) < MANIFEST_COMPACT_INTERVAL:
            return
        folded = singles + [m for m in names if m.startswith("_manifests/compact-")]
        files = set()
        for m in folded:
            files.update(json.loads(self.store.get(m))["files"])
        target = f"_manifests/compact-{checkpoint_id:012d}.json"
        self.store.put(target, json.dumps({"checkpoint_id": checkpoint_id,
                                           "files": sorted(files)}).encode())
        for m in folded:
            if m != target:
                self.store.delete(m)
        logger.info("checkpoint %d: %d manifests compacted into %s (%d files)", checkpoint_id,
                    len(folded), target, len(files))


class FileTwoPhaseCommitWriter(TwoPhaseCommitWriter):
    """Stream writer of the Parquet file sink (driver-created, pickled to executors)."""

    def __init__(self, options: Dict[str, str], schema) -> None:
        super().__init__(dict(options))
        _check_unknown(options, COMMON_SINK_OPTIONS + FILE_SINK_OPTIONS, "barrier-files sink")
        self.checkpoint = CheckpointSinkOptions.parse(options)
        self.store = file_store_from_path(_get(options, "path"), options)
        refuse_packed(schema, "The barrier-files sink")
        names = schema.fieldNames()
        for col in ("kind", "checkpoint_id"):
            if col not in names:
                from barrier_sink.exceptions import InvalidOptionError

                raise InvalidOptionError(f"The barrier-files sink needs column '{col}'.")
        self.data_columns = [n for n in names if n not in PROTOCOL_COLUMNS]
        self.schema = schema

    def _arrow_schema(self):
        from pyspark.sql.types import StructType

        from barrier_core.schema import spark_arrow_schema

        return spark_arrow_schema(StructType([f for f in self.schema.fields
                                              if f.name in self.data_columns]))

    def begin_transaction(self, batch_id, partition_id, attempt, checkpoint_id):
        # The staged name is per attempt (a speculative copy never overwrites or deletes the
        # winner's file); the final name is per (batch, task, epoch), the same in every replay.
        """Open a staged Parquet file for one epoch of one task attempt (executor)."""
        epoch = "n" if checkpoint_id is None else str(checkpoint_id)
        name = f"part-b{batch_id:09d}-p{partition_id:05d}-e{epoch}.parquet"
        staged = f"_staging/part-b{batch_id:09d}-p{partition_id:05d}-a{attempt}-e{epoch}.parquet"
        return StagedFile(staged, name, checkpoint_id, batch_id, partition_id)

    def invoke(self, txn: StagedFile, row) -> None:
        """Buffer one record row (executor)."""
        txn.rows.append({c: row[c] for c in self.data_columns})

    def pre_commit(self, txn: StagedFile):
        """Write and close the staged file; return its handle (executor)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not txn.rows:
            return None
        table = pa.Table.from_pylist(txn.rows, schema=self._arrow_schema())
        buf = io.BytesIO()
        pq.write_table(table, buf)
        self.store.put(txn.staged, buf.getvalue())
        return {"staged": txn.staged, "final": txn.final, "checkpoint_id": txn.checkpoint_id,
                "batch_id": txn.batch_id, "partition_id": txn.partition_id,
                "records": len(txn.rows)}

    def abort_open(self, txn: StagedFile) -> None:
        """Delete a staged file that failed before pre-commit (executor)."""
        self.store.delete(txn.staged)

    def committer(self) -> FileSinkCommitter:
        """The driver half: a :class:`FileSinkCommitter` (driver commit worker)."""
        from barrier_sink.checkpointing import coordinator_factory

        backend = self.checkpoint.open_backend()
        return FileSinkCommitter(backend, coordinator_factory(backend, self.checkpoint),
                                 self.store)

    def storage_uri(self) -> str:
        """The sink's ``checkpoint.storage`` (driver)."""
        return self.checkpoint.storage_uri

    def checkpoint_location(self) -> str:
        """The query's Spark ``checkpointLocation`` (driver)."""
        return self.checkpoint.checkpoint_location


def published_files(path: str, options: Dict[str, str] = None) -> List[str]:
    """Every file published by completed checkpoints, from the manifests (driver)."""
    store = file_store_from_path(path, options or {})
    out: List[str] = []
    for m in store.list("_manifests/"):
        out += json.loads(store.get(m))["files"]
    return [store.uri(f) for f in sorted(set(out))]
