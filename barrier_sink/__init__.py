"""Two-phase-commit sinks: exactly-once Kafka (``barrier-kafka``) and Parquet files
(``barrier-files``), committed when a checkpoint completes; recovery and lingering-transaction
tools."""

from barrier_sink.lingering import abort_lingering, list_lingering

__all__ = ["abort_lingering", "list_lingering"]
