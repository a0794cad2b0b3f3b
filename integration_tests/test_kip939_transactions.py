"""Issue 13: KIP-939 transactions, which the broker never aborts on a timeout
(``kafka.transaction.two.phase.commit.enable``).

Apache Kafka 4.1 to 4.4 (every release on Maven Central) mark ``InitProducerId`` version 6, the
one that carries ``Enable2Pc``, as unstable: a broker offers it only with
``unstable.api.versions.enable=true``, and allows 2PC transactions only with
``transaction.two.phase.commit.enable=true``. The broker here is the harness's default version
with both set, a ``transaction.max.timeout.ms`` of 10 s and a 1 s abort sweep, so a plain
transaction is aborted within seconds of its timeout.

* a plain and a KIP-939 transaction are pre-committed side by side: the broker aborts the plain
  one after its timeout, the other stays open long past the broker's maximum and commits;
* the exactly-once pipeline is SIGKILLed in the middle of a driver commit and stays down longer
  than the transaction timeout: its pre-committed transactions are still open when it comes
  back, and the restart ends with every record exactly once, nothing open and the group offsets
  at the last checkpoint;
* brokers without the settings are refused at start, the error naming the missing one.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from kafka.admin import KafkaAdminClient

from barrier_core import faults
from barrier_sink.exceptions import TwoPhaseCommitUnavailableError
from barrier_sink.lingering import list_lingering
from barrier_sink.transaction import (EndResult, TransactionalWriter, check_two_phase_commit,
                                      commit_handle)
from integration_tests.pipeline_support import (assert_exactly_once, assert_prefix_exactly_once,
                                                produce_input, run_pipeline)
from integration_tests.sink_support import read_committed_topic
from kafka_harness.broker import KafkaBroker
from kafka_harness.topics import create_topic

MAX_TIMEOUT_MS = 10_000
TWO_PC = "kafka.transaction.two.phase.commit.enable"
KIP939_BROKER = {"unstable.api.versions.enable": "true",
                 "transaction.two.phase.commit.enable": "true",
                 "transaction.max.timeout.ms": MAX_TIMEOUT_MS,
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000}


@pytest.fixture(scope="module")
def kip939_broker(tmp_path_factory):
    broker = KafkaBroker(data_dir=str(tmp_path_factory.mktemp("kip939-broker")),
                         extra_properties=KIP939_BROKER).start()
    yield broker
    broker.stop()


def _topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return create_topic(admin, f"{name}_{uuid.uuid4().hex[:6]}", partitions)
    finally:
        admin.close()


def _pre_commit(config, tid, topic, value, two_phase):
    writer = TransactionalWriter(config, tid, MAX_TIMEOUT_MS // 2, 0, 0, 1,
                                 two_phase=two_phase).open()
    writer.send(topic, value)
    handle = writer.pre_commit()
    writer.close_without_finishing()
    return handle


def _open_ids(config, prefix):
    return {t.transactional_id for t in list_lingering(config, prefix)}


def test_a_kip939_transaction_outlives_the_timeout_that_aborts_a_plain_one(kip939_broker):
    config = {"bootstrap_servers": kip939_broker.bootstrap}
    topic = _topic(kip939_broker.bootstrap, "kip939")
    prefix = "kip939-" + uuid.uuid4().hex[:6]
    plain_id, two_pc_id = f"{prefix}-p0-a0-s0", f"{prefix}-p1-a0-s0"
    plain = _pre_commit(config, plain_id, topic, b"plain", two_phase=False)
    two_pc = _pre_commit(config, two_pc_id, topic, b"kip939", two_phase=True)
    started = time.monotonic()
    assert _open_ids(config, prefix) == {plain_id, two_pc_id}
    # The broker aborts the plain transaction once its 5 s timeout has passed (1 s sweep).
    deadline = started + 60
    while plain_id in _open_ids(config, prefix):
        assert time.monotonic() < deadline, "the broker never aborted the plain transaction"
        time.sleep(0.5)
    # Stay past the broker's maximum timeout plus two sweeps: the KIP-939 one is still open.
    past_max = started + MAX_TIMEOUT_MS / 1000 + 2
    while time.monotonic() < past_max:
        time.sleep(past_max - time.monotonic())
    still_open = list_lingering(config, prefix)
    assert [t.transactional_id for t in still_open] == [two_pc_id]
    assert still_open[0].age_ms > MAX_TIMEOUT_MS
    # The timeout's abort bumped the plain id's epoch: its handle can no longer commit.
    assert commit_handle(config, plain) is EndResult.FENCED
    assert commit_handle(config, two_pc) is EndResult.COMMITTED
    assert read_committed_topic(kip939_broker.bootstrap, topic) == [b"kip939"]
    assert _open_ids(config, prefix) == set()


def test_pipeline_down_longer_than_the_transaction_timeout_loses_nothing(kip939_broker,
                                                                         tmp_path):
    bootstrap, records = kip939_broker.bootstrap, 10_000
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        topic = produce_input(admin, bootstrap, records, 53)
    finally:
        admin.close()
    output = _topic(bootstrap, "kip939_out", 2)
    workdir = str(tmp_path)
    group, prefix = f"kip939-{uuid.uuid4().hex[:6]}", f"kip939-{uuid.uuid4().hex[:6]}"
    # A transaction timeout far below interval + checkpoint timeout + restart budget: the
    # guard accepts it only because KIP-939 transactions do not time out.
    args = ["--sink-option", f"{TWO_PC}=true",
            "--sink-option", f"kafka.transaction.timeout.ms={MAX_TIMEOUT_MS // 2}"]
    crash_dir = os.path.join(workdir, "crash")
    point = faults.FaultPoint.COMMIT_MID_TRANSACTIONS.value
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      faults.fault_env(crash_dir, crash_at=f"{point}:2"),
                      max_offsets_per_trigger=records // 4, extra_args=args)
    crashed = os.path.join(crash_dir, "crashed")
    assert os.path.exists(crashed), f"never reached the crash point (exit {rc}); " \
                                    f"see {workdir}/run.log"
    assert 0 < assert_prefix_exactly_once(bootstrap, output) < records
    config = {"bootstrap_servers": bootstrap}
    waiting = _open_ids(config, prefix)
    assert waiting, "the kill left no pre-committed transaction to wait for its commit"
    # The fault: stay down longer than the broker's maximum transaction timeout (plus sweeps).
    down_until = os.path.getmtime(crashed) + MAX_TIMEOUT_MS / 1000 + 3
    while time.time() < down_until:
        time.sleep(down_until - time.time())
    survivors = list_lingering(config, prefix)
    assert {t.transactional_id for t in survivors} == waiting
    assert min(t.age_ms for t in survivors) > MAX_TIMEOUT_MS
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=records // 4, extra_args=args)
    assert rc == 0, f"restart failed (exit {rc}); see {workdir}/run.log"
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, records)


def test_brokers_without_kip939_are_refused_at_start_naming_the_setting(bootstrap, tmp_path):
    """The suite's default broker does not offer InitProducerId v6; a broker that offers it
    with ``transaction.two.phase.commit.enable`` false refuses the transaction."""
    with pytest.raises(TwoPhaseCommitUnavailableError,
                       match="unstable.api.versions.enable=true"):
        check_two_phase_commit({"bootstrap_servers": bootstrap}, "kip939-check-a", 60_000)
    broker = KafkaBroker(data_dir=str(tmp_path / "no-2pc"),
                         extra_properties={**KIP939_BROKER,
                                           "transaction.two.phase.commit.enable": "false"})
    with broker:
        with pytest.raises(TwoPhaseCommitUnavailableError,
                           match="transaction.two.phase.commit.enable=true on every broker"):
            check_two_phase_commit({"bootstrap_servers": broker.bootstrap},
                                   "kip939-check-b", 5_000)
