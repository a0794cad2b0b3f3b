"""Exceptions of the barrier-kafka plugin. ``BarrierKafkaError`` is the root of every error the
plugin raises on purpose; the other packages' exceptions derive from it."""


class BarrierKafkaError(Exception):
    """Root of all barrier-kafka errors."""


class InvalidOptionError(BarrierKafkaError, ValueError):
    """An option is unknown, malformed or conflicts with another; the message names it and the fix."""


class OffsetOutOfRangeError(BarrierKafkaError):
    """Requested offsets are no longer (or not yet) in Kafka and ``failOnDataLoss`` is true."""


class MissingTopicError(BarrierKafkaError):
    """A subscribed or assigned topic does not exist."""


class BrokerUnreachableError(BarrierKafkaError):
    """No Kafka broker answered at the bootstrap address; the message names the address, the
    security protocol and the likely causes."""
