"""Creating kafka-python clients with errors a user can act on (driver and executors).

kafka-python reports a broker it cannot reach, a listener that speaks another protocol and an
untrusted certificate alike, as a timeout while constructing the client ("Unable to bootstrap
from ..."; ``NoBrokersAvailable`` in older releases). Every client the
plugin creates goes through :func:`kafka_client`, which turns that into a
:class:`~barrier_core.exceptions.BrokerUnreachableError` naming the bootstrap address, the
security protocol and the likely causes. Secrets in the configuration are never part of it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, TypeVar

from barrier_core.exceptions import BrokerUnreachableError

T = TypeVar("T")


def unreachable_message(config: Mapping[str, Any], role: str) -> str:
    servers = config.get("bootstrap_servers")
    if isinstance(servers, (list, tuple)):
        servers = ",".join(map(str, servers))
    protocol = str(config.get("security_protocol") or "PLAINTEXT")
    return (f"The barrier-kafka {role} could not reach any Kafka broker at {servers!r} "
            f"(kafka.security.protocol {protocol}). Likely causes: a wrong host or port in "
            "kafka.bootstrap.servers; a listener that speaks another protocol than "
            f"{protocol} (a SASL or TLS listener reached as PLAINTEXT, or the reverse: set "
            "kafka.security.protocol to what that listener expects); a TLS certificate the "
            "client does not trust (kafka.ssl.truststore.location); wrong SASL credentials; "
            "or a firewall between this machine and the brokers.")


def kafka_client(factory: Callable[..., T], config: Mapping[str, Any], role: str) -> T:
    """``factory(**config)`` (KafkaAdminClient, KafkaProducer, KafkaConsumer), raising
    :class:`BrokerUnreachableError` when no broker answers."""
    from kafka import errors

    bootstrap_failures = tuple(getattr(errors, name) for name in
                               ("NoBrokersAvailable", "KafkaTimeoutError")
                               if hasattr(errors, name))
    try:
        return factory(**config)
    except bootstrap_failures as exc:  # construction only bootstraps: nothing else times out
        raise BrokerUnreachableError(f"{unreachable_message(config, role)} ({exc})") from None
