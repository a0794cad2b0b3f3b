"""``keyed_process``: a barrier-aligned keyed stateful operator on ``applyInPandasWithState``.

The plan is built on the driver; the per-key-group function runs on executors.

Plan:

1. Every row gets key group(s) (``__kg``): a record its key's group
   (:func:`~barrier_ops.keygroups.key_group_column`), a barrier or cancellation marker every key
   group ``0 .. max_parallelism - 1`` (fan-out with ``explode``), an upstream ack row one group
   derived from its text.
2. ``groupBy("__kg").applyInPandasWithState(...)`` with ``NoTimeout`` (``ProcessingTimeTimeout``
   would make Spark run empty batches forever) and ``append`` output mode: the
   :class:`~barrier_ops.runtime.KeyGroupRuntime` of each key group lives in ``GroupState``
   (:mod:`barrier_ops.key_group_state`).
   The first key group a Python worker runs freezes the worker's long-lived heap
   (:func:`~barrier_core.worker_heap.freeze_long_lived_objects`): PySpark runs a full garbage
   collection after every task of a reused worker, which otherwise walks pandas, pyarrow and
   PySpark's objects again each time.
   A stream the source packs per key group (``packedKeyGroups``) keeps the key group the
   source computed, and each task unpacks its rows before the runtime sees them
   (:func:`~barrier_core.packed_source.unpack_frames`), in key-group order.
   With ``runtime_store="backend"`` the step is stateless ``applyInPandas`` instead, the
   runtimes kept in the state backend between micro-batches (:mod:`barrier_ops.batch_runtimes`).
3. Where the user's output columns allow it (:func:`~barrier_ops.packed_rows.packable`), the
   stateful step returns a key's records packed into rows of arrays and the JVM unpacks them
   (:mod:`barrier_ops.packed_rows`): same rows, a fraction of PySpark's per-row cost.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, Union

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)

from barrier_ops.arrow_records import arrow_record_types
from barrier_ops.batch_runtimes import BatchRuntimes, batch_identity, layout_name
from barrier_ops.exceptions import InvalidOptionError
from barrier_ops.function import as_keyed_function
from barrier_ops.keygroups import (DEFAULT_MAX_PARALLELISM, key_group_sql, quoted,
                                   range_group_keys)
from barrier_ops.key_group_state import (KEY_GROUP_COLUMN, RANGE_COLUMN, STATE_SCHEMA,
                                         run_batch, run_range)
from barrier_ops.options import (EXACTLY_ONCE, RECORDS_ARROW, RECORDS_PANDAS, RUNTIME_BACKEND,
                                  RUNTIME_SPARK, OperatorOptions)
from barrier_ops.output_rows import CONTROL_COLUMNS
from barrier_ops.packed_rows import PACKED_ROW_RECORDS, packable, packed_schema, unpack
from barrier_core.packed_source import packed_key_groups, unpack_frames, unpacked_schema
from barrier_core.schema import KIND_ACK, KIND_RECORD
from barrier_core.jar_archives import keep_jar_directories
from barrier_core.worker_heap import freeze_long_lived_objects

logger = logging.getLogger(__name__)

CONTROL_FIELDS = [
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("kind", StringType()),
    StructField("checkpoint_id", LongType()),
    StructField("checkpoint_timestamp", LongType()),
    StructField("barrier_channels", ArrayType(StringType())),
    StructField("ack", StringType()),
]
REQUIRED_INPUT = ("kind", "checkpoint_id", "topic", "partition", "offset")
#: The micro-batch's time on every row, with ``runtime_store="backend"``.
BATCH_TIME_COLUMN = "__batch_ms"


def operator_output_schema(output_schema: Union[StructType, str]) -> StructType:
    """The user's output columns followed by the control columns (:data:`CONTROL_FIELDS`)."""
    user = _as_struct(output_schema)
    clash = [f.name for f in user.fields if f.name in CONTROL_COLUMNS]
    if clash:
        raise InvalidOptionError(f"output_schema uses reserved column names {clash}; the operator "
                                 f"adds {CONTROL_COLUMNS} itself")
    return StructType(list(user.fields) + CONTROL_FIELDS)


def keyed_process(df: DataFrame, key_col: str, fn: Callable, output_schema,
                  operator_id: str, state_backend, *,
                  max_parallelism: int = DEFAULT_MAX_PARALLELISM, mode: str = EXACTLY_ONCE,
                  restore_from: Optional[Union[int, str]] = None,
                  restore_requires_complete: bool = True,
                  on_timer: Optional[Callable] = None, watermark_delay_ms: int = 0,
                  state_backend_options: Optional[dict] = None,
                  incremental_checkpoints: bool = False,
                  records_format: str = RECORDS_PANDAS,
                  parallelism: Optional[int] = None,
                  runtime_store: str = RUNTIME_SPARK) -> DataFrame:
    """Apply ``fn`` per key with keyed state, aligning checkpoint barriers (driver).

    Parameters
    ----------
    df : DataFrame
        A barrier-kafka stream (``spark.readStream.format("barrier-kafka")``) or the output of
        another operator / passthrough helper: it needs ``kind``, ``checkpoint_id``, ``topic``,
        ``partition``, ``offset`` (and ``barrier_channels``, ``checkpoint_timestamp``,
        ``timestamp`` when present) plus ``key_col``. A barrier-kafka stream read with
        ``packedKeyGroups`` equal to ``max_parallelism`` and keyed by ``"key"`` arrives packed
        per key group (:mod:`barrier_core.packed_source`): ``fn`` gets the same records; fewer
        rows cross Spark's shuffle.
    key_col : str
        The key column; keys map to ``max_parallelism`` key groups by crc32 of their bytes.
    fn : callable or KeyedProcessFunction
        ``fn(key, records, state)`` -> rows (DataFrame, iterable of tuples or dicts, or None);
        ``records`` is a pandas DataFrame (a ``pyarrow.RecordBatch`` with
        ``records_format="arrow"``) of the key's records of one epoch in channel order,
        ``state`` a :class:`~barrier_ops.state.KeyedContext` (value/list/map state, timers).
    output_schema : StructType or DDL str
        The columns ``fn`` returns; the operator appends the control columns.
    operator_id : str
        Stable name of the operator; names its snapshots (``chk-n/op-<id>/kg-<k>``).
    state_backend : str or StateBackend
        Where snapshots go (URI resolved on executors, or a picklable backend instance).
    max_parallelism : int
        Number of key groups; fixed for the life of the state (restores need the same value).
    mode : {"exactly_once", "at_least_once"}
        Aligner (holds back records after a barrier) or tracker (only counts barriers).
    restore_from : int or str, optional
        Checkpoint id or savepoint path to load each key group's state from when Spark's own
        state has none (a new query, e.g. with different shuffle partitions).
    on_timer : callable, optional
        ``on_timer(key, timestamp_ms, state)`` -> rows, for a plain ``fn``.
    watermark_delay_ms : int
        Event-time watermark = max record ``timestamp`` seen minus this.
    incremental_checkpoints : bool
        Write only the keys touched since the previous checkpoint (deltas chained on a full
        snapshot, as Flink's ``state.backend.incremental``; file and S3 backends); see
        "Incremental checkpoints" in operations.md.
    records_format : {"pandas", "arrow"}
        What ``records`` is: a pandas DataFrame (the default) or a ``pyarrow.RecordBatch`` with
        the same columns and rows. Handing a key its records costs about 1.6 us as Arrow
        against 7-8 us as pandas, which halves the operator's own time with thousands of keys
        a key group; see "Records as Arrow" in operations.md.
    parallelism : int, optional
        Flink's operator parallelism: Spark calls the operator once per batch for each of
        ``parallelism`` contiguous ranges of key groups instead of once per key group (Spark's
        fixed cost per call, a few ms, is then paid ``parallelism`` times a batch, not
        ``max_parallelism`` times). Set it to ``spark.sql.shuffle.partitions``: each task
        then runs one range. Every key group keeps its own state, alignment, snapshots and
        output channel, so checkpoints and savepoints restore into any parallelism; Spark's
        own state is kept per range, so a running query (its ``checkpointLocation``) keeps the
        parallelism it started with. None (the default): one call per key group.
    runtime_store : {"spark", "backend"}
        Where each key group's runtime (keyed state, alignment, held-back records, timers)
        stays between micro-batches. ``"spark"`` (the default): Spark's state store, through
        ``applyInPandasWithState``. ``"backend"``: ``state_backend``, one object a key group
        (a range with ``parallelism``) and micro-batch, through stateless ``applyInPandas``,
        which costs Spark less a batch (:mod:`barrier_ops.batch_runtimes`). It needs a
        streaming query and a ``file://`` backend every executor reaches or an ``s3://`` one.
        Output, checkpoints and guarantees are the same; a running query (its
        ``checkpointLocation``) keeps the store it started with. On Spark 4.1+ build the
        session with ``barrier_kafka.recommended_spark_conf()``: it turns off adaptive
        execution of stateless streams, which runs each batch of this operator as two Spark
        jobs. See "State between batches in the state backend" and "Adaptive execution of
        stateless streams" in operations.md.

    Returns
    -------
    DataFrame
        Streaming (or batch) DataFrame with ``output_schema`` + control columns; ``kind`` is
        ``record`` (``checkpoint_id`` = epoch), ``ack`` or ``barrier`` (see protocol.md).
    """
    opts = OperatorOptions(operator_id, state_backend, max_parallelism, mode, restore_from,
                           restore_requires_complete, watermark_delay_ms,
                           dict(state_backend_options or {}), incremental_checkpoints,
                           records_format, parallelism, runtime_store)
    kfn = as_keyed_function(fn, on_timer)
    from pyspark import cloudpickle

    cloudpickle.dumps(kfn)  # fail on the driver, not in a task, when fn is not picklable
    user_schema = _as_struct(output_schema)   # a DDL string is parsed by the JVM: once
    out_schema = operator_output_schema(user_schema)
    user_columns = [f.name for f in user_schema.fields]
    pack = PACKED_ROW_RECORDS if packable(user_schema) else None
    in_schema = df.schema   # one analysis in the JVM for the checks below
    columns = in_schema.names
    missing = [c for c in REQUIRED_INPUT + (key_col,) if c not in columns]
    if missing:
        raise InvalidOptionError(
            f"keyed_process input lacks columns {missing}; it has {columns}. "
            + (f"key_col={key_col!r} must name one of those columns. " if key_col in missing
               else "")
            + "Feed it a barrier-kafka stream (use barrier_ops.passthrough helpers for "
            "stateless steps so control rows and columns survive).")
    packed_input = _check_packed_input(in_schema, key_col, max_parallelism)
    # the session's zone, read once: packed output converts to it, packed input from it
    zone = _pandas_time_zone(df) if pack or packed_input else None
    time_zone = zone if pack else None
    input_zone = zone if packed_input else None
    keyed = with_key_groups(df, key_col, max_parallelism)
    record_types = (arrow_record_types(unpacked_schema(keyed.schema), exclude=(KEY_GROUP_COLUMN,))
                    if records_format == RECORDS_ARROW else None)
    if parallelism is None:
        group_col, run = KEY_GROUP_COLUMN, run_batch
    else:
        keyed = with_ranges(keyed, max_parallelism, parallelism)
        group_col, run, index_of = RANGE_COLUMN, run_range, range_indexes(parallelism)

    def group_of(key) -> int:
        """The key group, or the range's index, of a Spark grouping key (executor)."""
        return int(key[0]) if parallelism is None else index_of[int(key[0])]

    def run_group(group, blob, pdfs, batch_time_ms):
        """Key group (range) ``group``'s batch through its runtime (``blob``, or None for a
        new one): the output rows and the runtime's new state value (executor)."""
        freeze_long_lived_objects()
        keep_jar_directories()
        if packed_input:
            pdfs = unpack_frames(pdfs, input_zone, KEY_GROUP_COLUMN)
        return run(opts, kfn, key_col, user_columns, group, blob, pdfs, batch_time_ms, pack,
                   time_zone, record_types)

    def run_key_group(key, pdfs, state):
        out, blob = run_group(group_of(key), state.get[0] if state.exists else None, pdfs,
                              state.getCurrentProcessingTimeMs())
        state.update((blob,))
        if len(out):
            yield out

    if runtime_store == RUNTIME_BACKEND:
        return _on_backend_runtimes(keyed, group_col, opts, group_of, run_group, pack,
                                    user_schema, out_schema)
    grouped = keyed.groupBy(group_col)
    if pack is None:
        return grouped.applyInPandasWithState(run_key_group, out_schema, STATE_SCHEMA, "append",
                                              "NoTimeout")
    packed = grouped.applyInPandasWithState(run_key_group,
                                            packed_schema(user_schema, CONTROL_FIELDS),
                                            STATE_SCHEMA, "append", "NoTimeout")
    return unpack(packed, user_schema, CONTROL_FIELDS)


def _on_backend_runtimes(keyed: DataFrame, group_col: str, opts: OperatorOptions,
                         group_of: Callable, run_group: Callable, pack,
                         user_schema: StructType, out_schema: StructType) -> DataFrame:
    """The operator on stateless ``applyInPandas``, each group's runtime kept in the state
    backend between micro-batches (:mod:`barrier_ops.batch_runtimes`; plan built on the driver,
    the function runs on executors). ``group_of(key)`` names a Spark group's key group (range)
    and ``run_group(group, blob, frames, batch_time_ms)`` runs its batch, as for
    ``applyInPandasWithState``. Every row carries the batch's time
    (``current_timestamp()``, fixed per micro-batch as ``GroupState``'s processing time is), so
    a retried or speculative task sees the time its first attempt saw. Spark puts the batch's
    timestamp into the plan as a constant each batch; read as a number, that constant is
    written into the stage's generated Java code, a new class to compile every batch (tens of
    ms of the executors' CPU, in compiler and JIT). ``reflect`` turns it into text without
    generated code, so the stage's code stays the same from batch to batch."""
    layout = layout_name(opts.parallelism)
    keyed = keyed.withColumn(BATCH_TIME_COLUMN,
                             F.expr("reflect('java.lang.String', 'valueOf', "
                                    "unix_millis(current_timestamp()))"))

    def run_stateless(key, pdf):
        query_id, batch = batch_identity()
        batch_ms = int(pdf[BATCH_TIME_COLUMN].iat[0])
        del pdf[BATCH_TIME_COLUMN]
        group = group_of(key)
        runtimes = BatchRuntimes(opts.open_backend(), opts.operator_id, query_id, layout)
        blob, stale = runtimes.load_before(group, batch)
        out, blob = run_group(group, blob, [pdf], batch_ms)
        runtimes.save(group, batch, blob, stale)
        return out if len(out) else no_rows

    result_schema = out_schema if pack is None else packed_schema(user_schema, CONTROL_FIELDS)
    # a call without output rows returns this: every column of the schema, of a dtype PySpark
    # converts to any Arrow type (PySpark writes a task's results into one Arrow stream, one
    # schema: a frame without columns breaks it, and an empty float column cannot become a list)
    no_rows = pd.DataFrame({f.name: pd.Series([], dtype=object) for f in result_schema.fields})

    # the groups spread over the shuffle partitions as the "spark" store spreads them: Spark
    # 4.1+ runs a stateless stream adaptively unless the session turns it off (as
    # barrier_kafka.recommended_spark_conf does), and would coalesce a small batch into one task
    partitions = shuffle_partition_count(
        keyed.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    if partitions is not None:
        keyed = keyed.repartition(partitions, group_col)
    grouped = keyed.groupBy(group_col).applyInPandas(run_stateless, result_schema)
    return grouped if pack is None else unpack(grouped, user_schema, CONTROL_FIELDS)


def shuffle_partition_count(setting) -> Optional[int]:
    """``spark.sql.shuffle.partitions`` as a count, or None where it is not one (Databricks'
    ``auto``: the platform sizes each shuffle itself)."""
    try:
        count = int(str(setting).strip())
    except ValueError:
        return None
    return count if count > 0 else None


def with_ranges(keyed: DataFrame, max_parallelism: int, parallelism: int) -> DataFrame:
    """``keyed`` plus :data:`RANGE_COLUMN`: the Spark grouping value of the row's range of key
    groups (:func:`~barrier_ops.keygroups.operator_index`,
    :func:`~barrier_ops.keygroups.range_group_keys`)."""
    keys = ", ".join(str(int(k)) for k in range_group_keys(parallelism))
    index = f"int({KEY_GROUP_COLUMN} * {int(parallelism)} div {int(max_parallelism)})"
    return keyed.withColumn(RANGE_COLUMN, F.expr(f"element_at(array({keys}), {index} + 1)"))


def range_indexes(parallelism: int) -> dict:
    """Range index of each grouping value :func:`with_ranges` gives (executor)."""
    return {k: i for i, k in enumerate(range_group_keys(parallelism))}


def _check_packed_input(schema: StructType, key_col: str, max_parallelism: int) -> bool:
    """True when rows of ``schema`` are the source's packed layout (``packedKeyGroups``,
    :mod:`barrier_core.packed_source`) for this operator; raises ``InvalidOptionError`` when
    they are packed for another key or another number of key groups (driver)."""
    packed = packed_key_groups(schema)
    if packed is None:
        return False
    if key_col != "key":
        raise InvalidOptionError(
            f"keyed_process(key_col={key_col!r}) reads a barrier-kafka stream packed by the "
            f"Kafka key (source option packedKeyGroups={packed}); the source can only pack by "
            "the Kafka key. Key by 'key', or drop packedKeyGroups to key by another column.")
    if packed != int(max_parallelism):
        raise InvalidOptionError(
            f"The barrier-kafka source packs records for {packed} key groups "
            f"(packedKeyGroups={packed}) but keyed_process has max_parallelism="
            f"{max_parallelism}; set packedKeyGroups to the operator's max_parallelism.")
    return True


def with_key_groups(df: DataFrame, key_col: str, max_parallelism: int) -> DataFrame:
    """``df`` plus ``__kg``: records keep one row, markers fan out to every key group. A record
    row of the packed source layout keeps the key group the source computed.

    ``barrier_channels`` goes on as JSON text on control rows and null on records
    (:func:`~barrier_ops.input_events.channels_of` reads it): PySpark 4.3 sizes the Arrow batch
    it builds for ``applyInPandasWithState`` after every row, and for a list column that is null
    on most rows Arrow's ``ListVector.setValueCount`` walks back to the last non-null row each
    time, a cost quadratic in the rows per Arrow batch (a string column has no such walk).

    The expressions are SQL text: each is one call into the JVM, where building them from
    ``pyspark.sql.functions`` took several calls a function (benchmarks/bench_plan.py)."""
    schema = df.schema
    record, ack = f"'{KIND_RECORD}'", f"'{KIND_ACK}'"   # our own constants: plain words
    if "barrier_channels" in schema.names and isinstance(schema["barrier_channels"].dataType,
                                                         ArrayType):
        df = df.withColumn("barrier_channels", F.expr(
            f"CASE WHEN kind != {record} THEN to_json(barrier_channels) END"))
    n = int(max_parallelism)
    ack_col = "ack" if "ack" in schema.names else "CAST(NULL AS STRING)"
    record_group = (quoted(KEY_GROUP_COLUMN) if packed_key_groups(schema) == n
                    else key_group_sql(key_col, schema[key_col].dataType, n))
    groups = (f"CASE WHEN kind = {record} THEN array({record_group}) "
              f"WHEN kind = {ack} THEN array(CAST(pmod(crc32(CAST({ack_col} AS BINARY)), {n}) "
              f"AS INT)) ELSE sequence(0, {n - 1}) END")
    return df.withColumn(KEY_GROUP_COLUMN, F.expr(f"explode({groups})"))


def _pandas_time_zone(df: DataFrame) -> Optional[str]:
    """The time zone PySpark's Arrow conversion gives naive pandas timestamps in this session
    (driver): the session time zone, or None (the worker's local zone) where the legacy
    ``spark.sql.execution.pandas.respectSessionTimeZone`` is false. Packed output converts its
    timestamps as PySpark would convert them (:func:`~barrier_ops.packed_rows.utc_micros`).
    A session that will not say (a restricted configuration, as on some managed clusters) has
    the default: the session time zone is respected."""
    conf = df.sparkSession.conf
    try:
        respect = conf.get("spark.sql.execution.pandas.respectSessionTimeZone", "true")
    except Exception:  # noqa: BLE001 - Connect and managed runtimes raise their own errors
        respect = "true"
    if str(respect).strip().lower() == "false":
        return None
    return conf.get("spark.sql.session.timeZone")


def _as_struct(schema) -> StructType:
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        from pyspark.sql.types import _parse_datatype_string

        parsed = _parse_datatype_string(schema)
        if isinstance(parsed, StructType):
            return parsed
    raise InvalidOptionError(f"output_schema must be a StructType or DDL string, got {schema!r}")


