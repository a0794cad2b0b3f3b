"""Key groups: the unit of keyed state, fixed per operator like Flink's max parallelism.

A key maps to key group ``crc32(key bytes) mod max_parallelism`` (runs on the driver as a Spark
column expression, and in Python for tests and tools; both give the same number). Key bytes are
the key itself for binary keys, else the UTF-8 bytes of its string form; a null key goes to key
group 0. Because state is snapshotted per key group, a checkpoint restores into a query with any
number of shuffle partitions, as long as ``max_parallelism`` stays the same.
"""

from __future__ import annotations

import zlib
from typing import Any

DEFAULT_MAX_PARALLELISM = 128


def key_bytes(key: Any) -> bytes:
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    return str(key).encode("utf-8")


def key_group_of(key: Any, max_parallelism: int) -> int:
    """Key group of ``key`` (pure Python; same result as :func:`key_group_column`)."""
    if key is None:
        return 0
    return zlib.crc32(key_bytes(key)) % max_parallelism


def key_group_column(col, data_type, max_parallelism: int):
    """Spark column computing the key group of ``col`` (driver).

    Parameters
    ----------
    col : Column
        The key column.
    data_type : DataType
        Its Spark type: binary keys are hashed as they are, every other type as its string form.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    raw = col if isinstance(data_type, BinaryType) else col.cast("string").cast("binary")
    return F.coalesce(F.pmod(F.crc32(raw), F.lit(max_parallelism)).cast("int"), F.lit(0))
