"""Creating kafka-python clients with errors a user can act on (driver and executors).

kafka-python reports a broker it cannot reach, a listener that speaks another protocol and an
untrusted certificate alike, as a timeout while constructing the client ("Unable to bootstrap
from ..."; ``NoBrokersAvailable`` in older releases); the real reason only appears in its
connection log records. Every client the plugin creates goes through :func:`kafka_client`, which
listens to those records while the client is built (a handler on the ``kafka`` logger, removed
afterwards) and turns the timeout into a
:class:`~barrier_core.exceptions.BrokerUnreachableError` naming the bootstrap address, the
security protocol and the cause it found (wrong SASL credentials, a listener of another
protocol, an untrusted certificate, nothing listening), or the likely causes when it found none.
Secrets in the configuration are never part of it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Mapping, Optional, TypeVar

from barrier_core.exceptions import BrokerUnreachableError

T = TypeVar("T")


def _servers(config: Mapping[str, Any]) -> str:
    servers = config.get("bootstrap_servers")
    if isinstance(servers, (list, tuple)):
        servers = ",".join(map(str, servers))
    return str(servers)


def unreachable_message(config: Mapping[str, Any], role: str) -> str:
    servers = _servers(config)
    protocol = str(config.get("security_protocol") or "PLAINTEXT")
    return (f"The barrier-kafka {role} could not reach any Kafka broker at {servers!r} "
            f"(kafka.security.protocol {protocol}). Likely causes: a wrong host or port in "
            "kafka.bootstrap.servers; a listener that speaks another protocol than "
            f"{protocol} (a SASL or TLS listener reached as PLAINTEXT, or the reverse: set "
            "kafka.security.protocol to what that listener expects); a TLS certificate the "
            "client does not trust (kafka.ssl.truststore.location); wrong SASL credentials; "
            "or a firewall between this machine and the brokers.")


#: (substring of kafka-python's connection failure, SASL clients only?, what it means for the
#: user). First match wins; an entry for SASL clients only precedes the general reading.
_CAUSES = (
    ("SaslAuthenticationFailed", False, "the broker rejected the SASL credentials: check the "
     "username and password in kafka.sasl.jaas.config and kafka.sasl.mechanism"),
    ("IllegalSaslState", False, "that listener does not speak SASL (it is a PLAINTEXT or SSL "
     "listener): use its SASL port or set kafka.security.protocol to what it expects"),
    ("UnsupportedSaslMechanism", False, "the listener does not enable kafka.sasl.mechanism: use "
     "one of the mechanisms the broker lists in sasl.enabled.mechanisms"),
    ("CERTIFICATE_VERIFY_FAILED", False, "the client does not trust the broker's TLS "
     "certificate: set kafka.ssl.truststore.location to a PEM file holding the CA that signed it"),
    ("Handshake failed", False, "the TLS handshake failed: that listener does not speak TLS (set "
     "kafka.security.protocol to PLAINTEXT or SASL_PLAINTEXT, or use the broker's SSL port)"),
    ("Invalid frame length", False, "that listener speaks TLS: set kafka.security.protocol to SSL "
     "(or SASL_SSL) and kafka.ssl.truststore.location"),
    ("ECONNREFUSED", False, "nothing listens there: check the host and port in "
     "kafka.bootstrap.servers"),
    # The broker closes the connection right after a failed authentication, and kafka-python
    # then sometimes reports the close instead of the error response that preceded it.
    ("socket disconnected", True, "the broker closed the connection during SASL "
     "authentication: most likely it rejected the SASL credentials (check the username and "
     "password in kafka.sasl.jaas.config and kafka.sasl.mechanism), or that port is not a SASL "
     "listener"),
    ("socket disconnected", False, "the broker closed the connection after the first request: "
     "the listener most likely requires SASL or TLS (set kafka.security.protocol and the "
     "credentials it expects)"),
)


class _ConnectionFailures(logging.Handler):
    """Collects kafka-python's connection failure reasons while one client is built: records
    of the building thread and of threads started since (the new client's I/O thread), not of
    the process's other clients (a parked producer of a broker that went away keeps logging
    'connection refused', which must not be read as this client's cause)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages = []
        # Thread objects, not idents: an ident is reused once its thread ended.
        self._older = set(threading.enumerate()) - {threading.current_thread()}

    def emit(self, record) -> None:  # runs in the thread that logs
        if threading.current_thread() in self._older:
            return
        try:
            self.messages.append(record.getMessage())
        except Exception:  # noqa: BLE001 - a diagnostic must never break the client
            pass


def diagnose(messages, security_protocol: Optional[str] = None) -> Optional[str]:
    """What kafka-python's connection failures say about the cause, or None."""
    text = "\n".join(messages)
    sasl = (security_protocol or "").upper().startswith("SASL")
    for needle, sasl_only, meaning in _CAUSES:
        if needle in text and (sasl or not sasl_only):
            return meaning
    return None


def kafka_client(factory: Callable[..., T], config: Mapping[str, Any], role: str) -> T:
    """``factory(**config)`` (KafkaAdminClient, KafkaProducer, KafkaConsumer), raising
    :class:`BrokerUnreachableError` when no broker answers, naming the cause when kafka-python's
    connection failures show it (wrong credentials, wrong protocol, untrusted certificate,
    nothing listening)."""
    from kafka import errors

    bootstrap_failures = tuple(getattr(errors, name) for name in
                               ("NoBrokersAvailable", "KafkaTimeoutError")
                               if hasattr(errors, name))
    failures = _ConnectionFailures()
    kafka_logger = logging.getLogger("kafka")
    kafka_logger.addHandler(failures)
    try:
        return factory(**config)
    except bootstrap_failures as exc:  # construction only bootstraps: nothing else times out
        cause = diagnose(failures.messages, config.get("security_protocol"))
        if cause is not None:
            raise BrokerUnreachableError(
                f"The barrier-kafka {role} could not connect to the Kafka brokers at "
                f"{_servers(config)!r} (kafka.security.protocol "
                f"{config.get('security_protocol') or 'PLAINTEXT'}): {cause}.") from None
        raise BrokerUnreachableError(f"{unreachable_message(config, role)} ({exc})") from None
    finally:
        kafka_logger.removeHandler(failures)
