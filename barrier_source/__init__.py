"""The barrier-kafka source: Spark's Kafka source semantics plus checkpoint barriers
(:class:`barrier_source.reader.BarrierKafkaStreamReader`).

Register it, with the sinks, through :func:`barrier_kafka.register`.
"""

from __future__ import annotations

from barrier_core.exceptions import BarrierKafkaError, InvalidOptionError

__all__ = ["BarrierKafkaError", "InvalidOptionError"]

