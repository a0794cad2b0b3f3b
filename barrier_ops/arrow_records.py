"""Each key's records as a ``pyarrow.RecordBatch`` (``keyed_process(..., records_format="arrow")``).

The types are chosen on the driver (:func:`arrow_record_types`, from the operator input's Spark
schema); the batches are made on executors, inside ``applyInPandasWithState``.

Why: the operator hands the user's function the records of one key at a time. As a pandas
frame, each costs about 7-8 us however few rows it holds (pandas slices every block of the
frame, builds its index and registers each view for copy-on-write), which at 100,000 keys is
most of the operator's own time. A slice of an Arrow record batch costs about 1.6 us. So with
``records_format="arrow"`` the rows of a key group's epoch segment are converted to Arrow once
(about 2 ms for 3,000 rows of a Kafka source's columns) and each key gets a zero-copy slice.

What the function sees: the same columns, rows and row order as the pandas frame, each column
of the Arrow type that holds what the frame holds (:func:`arrow_record_types`): text as
``string``, bytes as ``binary``, integers of their width (null where the frame has NaN),
timestamps as ``timestamp[ns]`` without a zone, wall time in the session time zone as in the
frame. A type with no entry there (decimal, array, map, struct) is inferred from the values.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import pandas as pd

#: Spark type name (``DataType.typeName()``) -> Arrow type factory, for the types whose pandas
#: values have one exact Arrow type.
_ARROW_TYPE_OF = {
    "string": "string", "binary": "binary", "boolean": "bool_", "byte": "int8",
    "short": "int16", "integer": "int32", "long": "int64", "float": "float32",
    "double": "float64", "date": "date32",
}
_TIMESTAMP_TYPES = ("timestamp", "timestamp_ntz")


def arrow_record_types(schema, exclude=()) -> Dict[str, Optional[object]]:
    """Column name -> the ``pyarrow`` type its values get in a key's record batch, or None (the
    type is inferred), for every field of the Spark ``schema`` not in ``exclude`` (driver)."""
    import pyarrow as pa

    types: Dict[str, Optional[object]] = {}
    for f in schema.fields:
        if f.name in exclude:
            continue
        name = f.dataType.typeName()
        if name in _TIMESTAMP_TYPES:
            types[f.name] = pa.timestamp("ns")
        elif name in _ARROW_TYPE_OF:
            types[f.name] = getattr(pa, _ARROW_TYPE_OF[name])()
        else:
            types[f.name] = None
    return types


def to_record_batch(rows: pd.DataFrame, types: Mapping[str, Optional[object]],
                    same: Optional[Mapping[str, Any]] = None):
    """``rows`` as one ``pyarrow.RecordBatch``, each column of its type in ``types`` (executor).
    A column whose values do not convert to that type (a column ``types`` does not name, or an
    upstream step that changed what a column holds) gets the type Arrow infers; one whose values
    no Arrow type holds raises ``ValueError`` naming the column and the ways out.

    ``same``: columns whose value the caller knows on every row it will read, and that value
    (the ``kind`` of a range's rows, whose records are all ``record``): the column is that
    value repeated, of its type in ``types``, instead of a conversion of each row's value
    (about 3 ms for 50,000 strings). The caller reads no other rows of such a column."""
    import pyarrow as pa

    failures = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError,
                ValueError)
    arrays = []
    for name in rows.columns:
        series = rows[name]
        wanted = types.get(name)
        if same and name in same and wanted is not None:
            arrays.append(pa.repeat(pa.scalar(same[name], type=wanted), len(rows)))
            continue
        if wanted is not None:
            try:
                arrays.append(pa.Array.from_pandas(series, type=wanted))
                continue
            except failures:
                pass  # values that are not of the declared type: let Arrow infer one
        try:
            arrays.append(pa.Array.from_pandas(series))
        except failures as exc:
            raise ValueError(
                f"records_format='arrow': column {name!r} of the records (pandas dtype "
                f"{series.dtype}) does not convert to Arrow ({type(exc).__name__}: {exc}). "
                "Cast it to a Spark type Arrow holds or drop it before keyed_process, or use "
                "records_format='pandas'.") from exc
    return pa.RecordBatch.from_arrays(arrays, names=[str(c) for c in rows.columns])


class ArrowKeyRows:
    """The rows ``a:b`` of a key-grouped frame (:func:`~barrier_ops.input_events.group_by_key`)
    as a slice of one record batch made from the whole frame (executor)."""

    __slots__ = ("_batch",)

    def __init__(self, rows: pd.DataFrame, types: Mapping[str, Optional[object]]) -> None:
        self._batch = to_record_batch(rows, types)

    @classmethod
    def taken(cls, batch, positions) -> "ArrowKeyRows":
        """Rows ``positions`` of ``batch`` (a record batch made from the frame the positions
        index, :func:`to_record_batch`), key by key (:func:`~barrier_ops.input_events.key_order`):
        a range of key groups converts its frame once and each key group takes its rows."""
        import pyarrow as pa

        out = cls.__new__(cls)
        out._batch = batch.take(pa.array(positions))
        return out

    @classmethod
    def sliced(cls, batch, a: int, b: int) -> "ArrowKeyRows":
        """Rows ``a:b`` of ``batch``, already key by key (zero-copy;
        :mod:`barrier_ops.range_records`)."""
        out = cls.__new__(cls)
        out._batch = batch.slice(a, b - a)
        return out

    def __call__(self, a: int, b: int):
        return self._batch.slice(a, b - a)
