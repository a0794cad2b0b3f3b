"""Exceptions of the keyed operators (``barrier_ops``)."""

from barrier_core.exceptions import BarrierKafkaError, InvalidOptionError

__all__ = ["OperatorError", "InvalidOptionError", "RestoreError", "StateAccessError"]


class OperatorError(BarrierKafkaError):
    """Root of the operator errors."""


class RestoreError(OperatorError):
    """A snapshot to restore from is missing, incomplete or belongs to another operator layout.

    Operator action: check ``restore_from`` (checkpoint id or savepoint path), ``operator_id`` and
    ``max_parallelism`` against what the state backend holds.
    """


class StateAccessError(OperatorError):
    """Keyed state was used outside a keyed context (e.g. after the user function returned)."""
