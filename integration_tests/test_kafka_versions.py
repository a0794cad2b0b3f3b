"""Issue 14: the Kafka versions users run. The whole suite runs on the harness's default broker
(``kafka_harness.jars.KAFKA_VERSION``); here the exactly-once pipeline, killed with SIGKILL in the
middle of a driver commit and restarted, runs against the oldest and the newest Apache Kafka
releases this project claims, each a real KRaft broker from Maven Central's jars:

* 3.9.1, the last 3.x release (KRaft; transactions v1, ListTransactions since 3.0);
* 4.3.1, the newest release whose broker and tools jars Maven Central serves here (4.4.0's
  broker is there, its kafka-tools jar is not).

Every record exactly once in ``read_committed`` output, no transaction of the sink left open and
the group offsets at the last completed checkpoint (Kafka's own tools are the witnesses).
"""

from __future__ import annotations

import os
import uuid

import pytest
from kafka.admin import KafkaAdminClient

from barrier_core.faults import FaultPoint, fault_env
from integration_tests.pipeline_support import (assert_exactly_once, assert_prefix_exactly_once,
                                                produce_input, run_pipeline)
from kafka_harness.broker import KafkaBroker
from kafka_harness.topics import create_topic

RECORDS = 10_000
KEYS = 53
VERSIONS = ["3.9.1", "4.3.1"]


@pytest.fixture(params=VERSIONS, scope="module")
def versioned_broker(request, tmp_path_factory):
    broker = KafkaBroker(data_dir=str(tmp_path_factory.mktemp(f"kafka-{request.param}")),
                         version=request.param).start()
    yield broker
    broker.stop()


def test_exactly_once_with_a_kill_on_each_kafka_version(versioned_broker, tmp_path):
    bootstrap = versioned_broker.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        topic = produce_input(admin, bootstrap, RECORDS, KEYS)
        output = create_topic(admin, "versions_out_" + uuid.uuid4().hex[:6], 2)
    finally:
        admin.close()
    workdir = str(tmp_path)
    tag = versioned_broker.version.replace(".", "")
    group, prefix = f"v{tag}-{uuid.uuid4().hex[:6]}", f"v{tag}-{uuid.uuid4().hex[:6]}"
    crash_dir = os.path.join(workdir, "crash")
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      fault_env(crash_dir,
                                crash_at=f"{FaultPoint.COMMIT_MID_TRANSACTIONS.value}:2"),
                      max_offsets_per_trigger=2_500)
    assert os.path.exists(os.path.join(crash_dir, "crashed")), \
        f"the pipeline never reached the crash point (exit {rc}); see {workdir}/run.log"
    assert 0 < assert_prefix_exactly_once(bootstrap, output) < RECORDS
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=2_500)
    assert rc == 0, f"restart failed (exit {rc}); see {workdir}/run.log"
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, RECORDS)
