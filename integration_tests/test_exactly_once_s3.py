"""Exactly-once with the checkpoint storage on S3, as a job on Databricks or EMR keeps it, not on
a local disk: a real S3-compatible server (moto in server mode) holds everything the protocol
stores (the coordinator's checkpoints and completed offsets, the operator's snapshots and its
runtimes between batches, the sink's batch records and attempt claims). S3 has no rename and no
directories: every write is one PUT, a listing is by key prefix.

The pipeline runs with the settings docs/operations.md recommends and each key group's state
between batches in the storage (``runtime_store="backend"``), and is SIGKILLed (the whole
process tree) at the protocol steps that leave different objects behind, restarted after each:
a range call stored its snapshots and its runtime and returned no row; the sink's tasks
pre-committed; the batch record stored, no ``_metadata``; the checkpoint complete and some of
its transactions committed (every restart reads the completed offsets from S3 to commit them
to the group). After every kill the ``read_committed`` output is a duplicate-free prefix; at
the end every record is there exactly once, no transaction of the sink is open and the group is
at the last completed checkpoint, read from S3.
"""

from __future__ import annotations

import os
import uuid

from barrier_core.faults import FaultPoint
from integration_tests.pipeline_support import (PACKED_SOURCE, RECOMMENDED_OPERATOR,
                                                RUNTIMES_IN_BACKEND, kill_chain, produce_input,
                                                run_fault_chain)
from state_backends.registry import backend_from_uri

RECORDS = 30_000
KEYS = 499
BATCH = 5_000

POINTS = [FaultPoint.OPERATOR_RUNTIME, FaultPoint.AFTER_PRECOMMIT,
          FaultPoint.COMMIT_BEFORE_METADATA, FaultPoint.COMMIT_MID_TRANSACTIONS]


def test_sigkill_chain_with_the_checkpoint_storage_on_s3(bootstrap, kafka_admin, topic_factory,
                                                         s3_server, s3_bucket, tmp_path,
                                                         monkeypatch):
    topic = produce_input(kafka_admin, bootstrap, RECORDS, KEYS)
    output = topic_factory(2, prefix="eo_s3")
    workdir = str(tmp_path)
    group, prefix = f"eo-s3-{uuid.uuid4().hex[:6]}", f"eo-s3-{uuid.uuid4().hex[:6]}"
    storage = f"s3://{s3_bucket}/job-{uuid.uuid4().hex[:6]}"
    # Credentials through boto3's default chain (the environment the pipeline and its Spark
    # workers inherit), as the docs recommend on a cluster; the rest as storage options.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    options = {"s3.endpoint": s3_server.endpoint_url, "s3.region": s3_server.region}
    args = ["--storage", storage]
    for key, value in options.items():
        args += ["--storage-option", f"{key}={value}"]
    backend = backend_from_uri(storage, options)
    run_fault_chain(bootstrap, topic, output, workdir, group, prefix, RECORDS,
                    kill_chain(workdir, POINTS), BATCH,
                    extra_args=tuple(args) + RECOMMENDED_OPERATOR + PACKED_SOURCE
                    + RUNTIMES_IN_BACKEND, storage=backend)
    # Everything went to S3: completed checkpoints there, and no local checkpoint storage.
    stored = backend.list("")
    assert any(p.startswith("chk-") and p.endswith("/_metadata") for p in stored), stored[:20]
    assert any(p.startswith("runtime/") for p in stored), stored[:20]
    assert not os.path.exists(os.path.join(workdir, "storage"))
