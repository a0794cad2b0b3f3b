"""Stateless steps that keep barrier and ack rows (driver-side DataFrame helpers).

A plain ``df.filter(cond)`` drops barrier rows whenever ``cond`` is false or null for them (their
``key``/``value`` are null), and ``df.select(cols)`` drops the control columns; either silently
breaks alignment downstream. These helpers apply the step to ``kind='record'`` rows only and
keep the control columns. They need one row per record: a stream the source packs for a keyed
operator (``packedKeyGroups``) is refused with a clear error.
"""

from __future__ import annotations

from typing import List, Union

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from barrier_core.packed_source import refuse_packed
from barrier_core.schema import KIND_RECORD
# the columns a keyed operator or a sink needs on every row (those present are kept)
from barrier_ops.output_rows import CONTROL_COLUMNS


def is_record() -> Column:
    return F.col("kind") == F.lit(KIND_RECORD)


def filter_records(df: DataFrame, condition: Union[Column, str]) -> DataFrame:
    """Keep records matching ``condition`` and every control row (barrier, ack).

    Examples
    --------
    >>> clean = filter_records(df, F.col("value").isNotNull())   # doctest: +SKIP
    """
    refuse_packed(df.schema, "barrier_ops.passthrough.filter_records")
    cond = F.expr(condition) if isinstance(condition, str) else condition
    return df.filter(~is_record() | F.coalesce(cond, F.lit(False)))


def with_record_column(df: DataFrame, name: str, col: Column) -> DataFrame:
    """``withColumn(name, col)`` evaluated on records only (null on control rows, so UDFs never
    see a barrier's null key/value)."""
    refuse_packed(df.schema, "barrier_ops.passthrough.with_record_column")
    if name in CONTROL_COLUMNS:
        raise ValueError(f"{name!r} is a control column; derive a new column instead")
    return df.withColumn(name, F.when(is_record(), col))


def select_records(df: DataFrame, *cols: Union[Column, str]) -> DataFrame:
    """``select(*cols)`` plus every control column present in ``df``; for computed columns on
    records use :func:`with_record_column` first."""
    refuse_packed(df.schema, "barrier_ops.passthrough.select_records")
    names = [c for c in CONTROL_COLUMNS if c in df.columns]
    chosen: List[Union[Column, str]] = [c for c in cols if not (isinstance(c, str) and c in names)]
    return df.select(*chosen, *names)


def explode_records(df: DataFrame, name: str, array_col: Column) -> DataFrame:
    """One record per element of ``array_col`` (e.g. words of a line); control rows stay one
    row each with ``name`` null. Exploded records keep their source ``offset``, so per-channel
    order is still well defined (ties keep their relative order within a micro-batch)."""
    refuse_packed(df.schema, "barrier_ops.passthrough.explode_records")
    arr = F.when(is_record(), array_col).otherwise(F.array(F.lit(None)))
    return df.withColumn(name, F.explode_outer(arr)).filter(~is_record() | F.col(name).isNotNull())


def records_only(df: DataFrame) -> DataFrame:
    """Records only: the explicit way to leave the checkpointed world (e.g. for debugging)."""
    refuse_packed(df.schema, "barrier_ops.passthrough.records_only")
    return df.filter(is_record())
