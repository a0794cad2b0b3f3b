"""Exceptions of the two-phase-commit sinks."""

from barrier_core.exceptions import BarrierKafkaError, InvalidOptionError


class SinkError(BarrierKafkaError):
    """A sink could not write, pre-commit, commit or abort."""


class TransactionCommitError(SinkError):
    """A pre-committed transaction of a completed checkpoint could not be committed.

    Operator action: the data is still in Kafka as a pre-committed transaction until
    ``transaction.timeout.ms`` expires; restart the query from the same checkpoint location
    before then and recovery commits it again.
    """


class RecordsNotWrittenError(SinkError):
    """Kafka did not accept some records of a transaction (too large, not authorised, not
    acknowledged in time). The transaction is aborted before its pre-commit, so the task fails
    and nothing of it is ever committed; the message names the records' problem and its fix."""


class CheckpointStorageMismatchError(InvalidOptionError):
    """The barrier-kafka source upstream does not use the sink's ``checkpoint.storage``."""


class TransactionTimeoutTooShortError(InvalidOptionError):
    """``transaction.timeout.ms`` cannot cover checkpoint interval + timeout + restart budget."""


class TwoPhaseCommitUnavailableError(InvalidOptionError):
    """``kafka.transaction.two.phase.commit.enable`` is true but the brokers refuse KIP-939
    transactions; the message names the missing broker setting (:mod:`barrier_sink.kip939`)."""


__all__ = ["SinkError", "CheckpointStorageMismatchError", "RecordsNotWrittenError", "TransactionCommitError",
           "TransactionTimeoutTooShortError", "TwoPhaseCommitUnavailableError",
           "InvalidOptionError"]
