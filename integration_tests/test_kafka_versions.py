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

import pytest

from integration_tests.pipeline_support import assert_killed_mid_commit_then_exactly_once
from kafka_harness.broker import KafkaBroker

VERSIONS = ["3.9.1", "4.3.1"]


@pytest.fixture(params=VERSIONS, scope="module")
def versioned_broker(request, tmp_path_factory):
    broker = KafkaBroker(data_dir=str(tmp_path_factory.mktemp(f"kafka-{request.param}")),
                         version=request.param).start()
    yield broker
    broker.stop()


def test_exactly_once_with_a_kill_on_each_kafka_version(versioned_broker, tmp_path):
    assert_killed_mid_commit_then_exactly_once(
        versioned_broker.bootstrap, str(tmp_path), "v" + versioned_broker.version.replace(".", ""))
