"""Key groups: the unit of keyed state, fixed per operator like Flink's max parallelism.

A key maps to key group ``crc32(key bytes) mod max_parallelism`` (runs on the driver as a Spark
column expression, and in Python for tests and tools; both give the same number). Key bytes are
the key itself for binary keys, else the UTF-8 bytes of its string form; a null key goes to key
group 0. Because state is snapshotted per key group, a checkpoint restores into a query with any
number of shuffle partitions, as long as ``max_parallelism`` stays the same.
"""

from __future__ import annotations

import zlib
from typing import Any, List, Optional

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


def key_group_column(name: str, data_type, max_parallelism: int):
    """Spark column computing the key group of column ``name`` (driver).

    Parameters
    ----------
    name : str
        The key column's name.
    data_type : DataType
        Its Spark type: binary keys are hashed as they are, every other type as its string form.
    """
    from pyspark.sql import functions as F

    return F.expr(key_group_sql(name, data_type, max_parallelism))


def key_group_sql(name: str, data_type, max_parallelism: int) -> str:
    """:func:`key_group_column` as SQL text (driver): a plan built from text takes one call
    into the JVM where building the column piece by piece takes a dozen."""
    from pyspark.sql.types import BinaryType

    raw = quoted(name)
    if not isinstance(data_type, BinaryType):
        raw = f"CAST(CAST({raw} AS STRING) AS BINARY)"
    return f"coalesce(CAST(pmod(crc32({raw}), {int(max_parallelism)}) AS INT), 0)"


def quoted(name: str) -> str:
    """A column name as a SQL identifier: in backticks, its own backticks doubled."""
    return "`" + name.replace("`", "``") + "`"


# ---------------------------------------------------------------------- key-group ranges
def operator_index(key_group: int, max_parallelism: int, parallelism: int) -> int:
    """The range of key groups ``key_group`` belongs to with ``parallelism`` ranges: contiguous
    ranges of about ``max_parallelism / parallelism`` key groups each, as Flink assigns key
    groups to an operator's subtasks (``keyGroup * parallelism // maxParallelism``)."""
    return key_group * parallelism // max_parallelism


def range_group_keys(parallelism: int) -> List[int]:
    """The value Spark groups range ``i`` by, for each range ``i``: the smallest integers whose
    Spark hash partitioning into ``parallelism`` partitions puts range ``i`` in partition
    ``i``, so with ``spark.sql.shuffle.partitions`` equal to ``parallelism`` every task gets
    one range (grouping by ``0, 1, ...`` would put ranges 0 and 1 of two in one partition).
    Depends on ``parallelism`` only, never on the session: it keys the ranges' state."""
    keys: List[Optional[int]] = [None] * parallelism
    missing, value = parallelism, 0
    while missing:
        slot = spark_hash_int(value) % parallelism
        if keys[slot] is None:
            keys[slot] = value
            missing -= 1
        value += 1
    return [int(k) for k in keys]


def spark_hash_int(value: int) -> int:
    """Spark's ``hash()`` of an ``int`` column value (Murmur3 x86 32-bit, seed 42), as a signed
    32-bit number: what Spark's hash partitioning of a grouping column takes ``pmod`` of."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k1 = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k1 = rotl(k1, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = rotl(42 ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1
