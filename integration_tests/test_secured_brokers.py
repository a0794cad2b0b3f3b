"""Issue 14: secured brokers for real. A KRaft broker with a SASL_PLAINTEXT listener
(SCRAM-SHA-512, credentials made at format time) and an SSL listener (a self-signed certificate
made with the JDK's keytool), next to the PLAINTEXT one the checks use.

* The exactly-once pipeline reads through SASL/SCRAM and writes through TLS, configured with the
  same ``kafka.*`` options as Spark's Kafka connector; the output is exactly-once and the SCRAM
  password appears in no log, no checkpoint file and no Spark checkpoint file.
* A wrong password, a client of the wrong protocol (both ways) and an untrusted certificate each
  fail with an error naming that cause (old main: one "could not reach any Kafka broker ...
  likely causes: ..." for all of them).
"""

from __future__ import annotations

import os
import uuid

import pytest
from kafka.admin import KafkaAdminClient

from barrier_core.exceptions import BrokerUnreachableError
from barrier_core.kafka_clients import kafka_client
from barrier_core.kafka_config import client_config, translate_kafka_options
from integration_tests.pipeline_support import (assert_exactly_once, produce_input,
                                                run_pipeline)
from kafka_harness.broker import SCRAM_PASSWORD, SCRAM_USER, KafkaBroker
from kafka_harness.topics import create_topic

JAAS = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="{user}" password="{password}";')


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory):
    broker = KafkaBroker(data_dir=str(tmp_path_factory.mktemp("secured-broker")),
                         secured=True).start()
    yield broker
    broker.stop()


def sasl_options(broker, password=SCRAM_PASSWORD, bootstrap=None) -> dict:
    return {"kafka.bootstrap.servers": bootstrap or broker.sasl_bootstrap,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": JAAS.format(user=SCRAM_USER, password=password)}


def ssl_options(broker, truststore=True, bootstrap=None) -> dict:
    options = {"kafka.bootstrap.servers": bootstrap or broker.ssl_bootstrap,
               "kafka.security.protocol": "SSL"}
    if truststore:
        options["kafka.ssl.truststore.location"] = str(broker.ca_pem)
    return options


def _args(flag: str, options: dict) -> list:
    return [a for k, v in options.items() for a in (flag, f"{k}={v}")]


def test_pipeline_reads_through_sasl_scram_and_writes_through_tls(secured_broker, tmp_path):
    broker = secured_broker
    plain = broker.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=plain)
    topic = produce_input(admin, plain, 12_000, 101)
    output = create_topic(admin, "secured_out_" + uuid.uuid4().hex[:6], 2)
    admin.close()
    workdir = str(tmp_path)
    group, prefix = f"sec-{uuid.uuid4().hex[:6]}", f"sec-{uuid.uuid4().hex[:6]}"
    extra = _args("--source-option", sasl_options(broker)) + \
        _args("--sink-option", ssl_options(broker))
    rc = run_pipeline(plain, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=4_000, extra_args=extra)
    assert rc == 0, f"exit {rc}; see {workdir}/run.log"
    assert_exactly_once(plain, topic, output, workdir, group, prefix, 12_000)
    leaks = []
    for root, _dirs, files in os.walk(workdir):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                if SCRAM_PASSWORD.encode() in f.read():
                    leaks.append(os.path.relpath(path, workdir))
    assert leaks == [], f"the SASL password is written in {leaks}"


def _connect(options: dict):
    config = client_config(translate_kafka_options({**options,
                                                    "kafka.bootstrap.timeout.ms": "4000"}),
                           "admin")
    return kafka_client(KafkaAdminClient, config, "source")


@pytest.mark.parametrize("case,expected", [
    ("wrong password", "rejected the SASL credentials"),
    ("SASL client on the PLAINTEXT port", "does not speak SASL"),
    ("PLAINTEXT client on the SASL port", "requires SASL or TLS"),
    ("untrusted certificate", "does not trust the broker's TLS certificate"),
    ("TLS client on the PLAINTEXT port", "does not speak TLS"),
])
def test_each_connection_mistake_gets_an_error_naming_it(secured_broker, case, expected):
    broker = secured_broker
    options = {
        "wrong password": sasl_options(broker, password="not-the-password-9a7"),
        "SASL client on the PLAINTEXT port": sasl_options(broker, bootstrap=broker.bootstrap),
        "PLAINTEXT client on the SASL port": {"kafka.bootstrap.servers": broker.sasl_bootstrap},
        "untrusted certificate": ssl_options(broker, truststore=False),
        "TLS client on the PLAINTEXT port": ssl_options(broker, bootstrap=broker.bootstrap),
    }[case]
    with pytest.raises(BrokerUnreachableError) as info:
        _connect(options)
    message = str(info.value)
    assert expected in message, message
    assert "not-the-password-9a7" not in message and SCRAM_PASSWORD not in message
    _connect(sasl_options(broker)).close()  # the right settings work on the same broker
