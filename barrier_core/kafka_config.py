"""Spark-style ``kafka.*`` options translated to kafka-python client settings (runs anywhere:
driver workers and executors). Shared by the source, the sinks and the tools; secrets (SASL
passwords, key passwords) are never put in messages.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Dict, Mapping, Tuple

from barrier_core.exceptions import InvalidOptionError
from barrier_core.option_spec import is_secret_key

logger = logging.getLogger(__name__)

# Java client settings Spark's Kafka source refuses, with Spark's reason.
_FORBIDDEN_KAFKA = {
    "kafka.auto.offset.reset": "use startingOffsets instead",
    "kafka.enable.auto.commit": "offsets are committed on checkpoint completion",
    "kafka.key.deserializer": "keys are always read as bytes",
    "kafka.value.deserializer": "values are always read as bytes",
    "kafka.interceptor.classes": "interceptors are not supported",
}
# Java name (after 'kafka.') -> kafka-python name where the generic rule ('.' -> '_') is wrong.
_KAFKA_RENAMES = {
    "ssl.key.password": "ssl_password",
    "ssl.keystore.password": "ssl_password",
    "ssl.truststore.location": "ssl_cafile",
    "ssl.keystore.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
}
# Handled by the source itself, not passed to the client.
_KAFKA_OWN = {"kafka.bootstrap.servers", "kafka.group.id"}




def canonical_options(options: Mapping[str, Any]) -> Dict[str, str]:
    """Option dict keyed by lower-cased name (Spark lower-cases them anyway)."""
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}


def _parse_jaas(value: str) -> Dict[str, str]:
    found = dict(re.findall(r'(username|password)\s*=\s*"([^"]*)"', value))
    out = {}
    if "username" in found:
        out["sasl_plain_username"] = found["username"]
    if "password" in found:
        out["sasl_plain_password"] = found["password"]
    if not out:
        raise InvalidOptionError("Option 'kafka.sasl.jaas.config' has no username=\"...\" / "
                                 "password=\"...\" (value not shown: it is a secret).")
    return out


def translate_kafka_options(options: Mapping[str, Any],
                            clients: Tuple[str, ...] = ("admin", "consumer")) -> Dict[str, Any]:
    """Spark-style ``kafka.*`` options -> kafka-python keyword arguments (shared with the sink).

    ``kafka.bootstrap.servers`` becomes ``bootstrap_servers`` (a list); ``kafka.group.id`` is
    left out (callers decide about groups). Settings none of ``clients`` ('admin', 'consumer',
    'producer') knows are logged (names only) and dropped. Values are converted to the type of
    kafka-python's default. kafka-python is imported only when a setting needs its defaults:
    options with nothing but ``kafka.bootstrap.servers`` and ``kafka.group.id`` translate
    without it. Two of the driver's short-lived Python workers that PySpark starts at every
    query start (``create_data_source`` for the schema, ``plan_data_source_read`` for the
    reader) need nothing else from it, and its import cost them 120-190 ms each.
    """
    known: Dict[str, Any] = {}
    out: Dict[str, Any] = {}
    o = canonical_options(options)
    if "kafka.bootstrap.servers" in o:
        out["bootstrap_servers"] = [s.strip() for s in o["kafka.bootstrap.servers"].split(",")
                                    if s.strip()]
    for key, raw in o.items():
        if not key.startswith("kafka.") or key in _KAFKA_OWN:
            continue
        if key in _FORBIDDEN_KAFKA:
            raise InvalidOptionError(f"Option '{key}' is not supported: {_FORBIDDEN_KAFKA[key]}.")
        java = key[len("kafka."):]
        if java == "sasl.jaas.config":
            out.update(_parse_jaas(raw))
            continue
        if java == "ssl.endpoint.identification.algorithm":
            out["ssl_check_hostname"] = raw.strip().lower() == "https"
            continue
        if java in ("ssl.truststore.location", "ssl.keystore.location") and \
                raw.lower().endswith((".jks", ".p12", ".pfx")):
            raise InvalidOptionError(f"Option '{key}': kafka-python needs PEM files, not a Java "
                                     "key store; convert it and pass the .pem path.")
        name = _KAFKA_RENAMES.get(java, java.replace(".", "_"))
        if not known:
            for client in clients:
                known.update(_client_defaults(client))
        if name not in known:
            logger.warning("barrier-kafka: Kafka setting '%s' is not known to kafka-python; "
                           "ignored", key)
            continue
        default = known[name]
        value: Any = raw
        if isinstance(default, bool):
            value = raw.strip().lower() == "true"
        elif isinstance(default, int):
            try:
                value = int(raw)
            except ValueError:
                raise InvalidOptionError(f"Option '{key}' must be an integer; got "
                                         f"'{'***' if is_secret_key(key) else raw}'.") from None
        out[name] = value
    return out


def _client_defaults(client: str) -> Mapping[str, Any]:
    """kafka-python's default configuration of ``client``: 'admin', 'consumer' or 'producer'."""
    if client == "admin":
        from kafka.admin import KafkaAdminClient
        return KafkaAdminClient.DEFAULT_CONFIG
    if client == "producer":
        from kafka import KafkaProducer
        return KafkaProducer.DEFAULT_CONFIG
    from kafka import KafkaConsumer
    return KafkaConsumer.DEFAULT_CONFIG


def client_config(kafka_config: Mapping[str, Any], client: str) -> Dict[str, Any]:
    """The subset of ``kafka_config`` that ``client`` ('consumer', 'admin', 'producer')
    accepts."""
    allowed = _client_defaults(client)
    return {k: v for k, v in kafka_config.items() if k in allowed}
