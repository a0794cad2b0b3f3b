"""Spark's read limits (admission control) on every supported PySpark version.

PySpark >= 4.2 passes a ``ReadLimit`` to ``latestOffset(start, limit)`` and asks the reader for
``getDefaultReadLimit()``; the classes live in ``pyspark.sql.streaming.datasource``. PySpark 4.0
and 4.1 have neither: Spark calls ``latestOffset()`` with no arguments, and the reader applies
its own default limit (see :class:`barrier_source.reader.BarrierKafkaStreamReader`). On those
versions this module defines stand-ins with the same names and fields, so the planner code is one
code path. Runs wherever the reader runs (driver planner worker, executors when unpickled).
"""

from __future__ import annotations

from dataclasses import dataclass

try:  # PySpark >= 4.2
    from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                                  ReadMinRows, SupportsTriggerAvailableNow)
    ADMISSION_CONTROL = True
except ImportError:  # PySpark 4.0 / 4.1: Spark's planner never sees these
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Base of the stand-in read limits."""

    @dataclass(frozen=True)
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """No limit: read everything available."""

    @dataclass(frozen=True)
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """At most ``max_rows`` records per batch (``maxOffsetsPerTrigger``)."""
        max_rows: int

    @dataclass(frozen=True)
    class ReadMinRows(ReadLimit):  # type: ignore[no-redef]
        """At least ``min_rows`` records per batch (``minOffsetsPerTrigger``)."""
        min_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """No-op mixin: these versions never call ``prepareForTriggerAvailableNow``."""

__all__ = ["ADMISSION_CONTROL", "ReadAllAvailable", "ReadLimit", "ReadMaxRows", "ReadMinRows",
           "SupportsTriggerAvailableNow"]
