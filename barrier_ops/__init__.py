"""barrier_ops: barrier-aligned keyed stateful operators for barrier-kafka streams.

``keyed_process(df, key_col, fn, output_schema, operator_id=..., state_backend=...)`` applies a
function with Flink-like keyed state (value, list, map state, timers) per key, aligns checkpoint
barriers per key group (exactly-once) or tracks them (at-least-once), snapshots each key group at
alignment and emits ``ack`` rows plus forwarded barriers. See ``docs/internals/protocol.md``.
"""

from barrier_core.ack import Acknowledgement, AckMetrics
from barrier_ops.function import KeyedProcessFunction
from barrier_ops.keygroups import DEFAULT_MAX_PARALLELISM, key_group_of
from barrier_ops.operator import CONTROL_FIELDS, keyed_process, operator_output_schema
from barrier_ops.options import AT_LEAST_ONCE, EXACTLY_ONCE, OperatorOptions
from barrier_ops.passthrough import (explode_records, filter_records, records_only,
                                     select_records, with_record_column)
from barrier_ops.state import KeyedContext, ListState, MapState, TimerService, ValueState

__all__ = ["keyed_process", "KeyedProcessFunction", "KeyedContext", "ValueState", "ListState",
           "MapState", "TimerService", "OperatorOptions", "EXACTLY_ONCE", "AT_LEAST_ONCE",
           "Acknowledgement", "AckMetrics", "key_group_of", "DEFAULT_MAX_PARALLELISM",
           "CONTROL_FIELDS", "operator_output_schema", "filter_records", "with_record_column",
           "select_records", "explode_records", "records_only"]
