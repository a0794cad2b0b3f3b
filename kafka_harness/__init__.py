"""Real services for tests and the demo: an Apache Kafka broker (KRaft, single node) started
from Apache's jars on Maven Central, and an S3-compatible HTTP server (moto's server mode).

Runs in the user's / test's driver process; nothing here is imported by the plugin itself.
"""

from kafka_harness.broker import KafkaBroker, BrokerStartError
from kafka_harness.jars import JarFetchError, fetch_broker_jars
from kafka_harness.s3 import S3Server

__all__ = ["KafkaBroker", "BrokerStartError", "JarFetchError", "fetch_broker_jars", "S3Server"]
