"""Options of ``spark.readStream.format("barrier-kafka")``, parsed once into a frozen dataclass.

Names follow Spark's Kafka source exactly (``kafka.*``, ``subscribe``, ``startingOffsets``, ...)
and Flink's checkpoint configuration (``execution.checkpointing.*``). Runs on the driver (in the
user's process for ``schema()`` and in the JVM-spawned planner worker for the reader); the parsed
options travel pickled to executors.

Spark lower-cases option names before the data source sees them, so every lookup here is
case-insensitive; messages use the canonical spelling from :data:`SOURCE_OPTIONS`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from barrier_core.exceptions import InvalidOptionError
from barrier_core.kafka_config import canonical_options, translate_kafka_options
from barrier_core.option_spec import (OptionSpec, check_known_options, parse_duration_ms,
                                     read_option)

PLACEMENT_END = "end"
PLACEMENT_TIMESTAMP = "timestamp"

SOURCE_OPTIONS = [
    OptionSpec("kafka.bootstrap.servers", None, "Kafka brokers, 'host:port[,host:port]'.",
               is_required=True),
    OptionSpec("kafka.", None, "Any Kafka client setting, passed to kafka-python with its name "
               "translated ('kafka.security.protocol' -> security_protocol; "
               "'kafka.sasl.jaas.config' -> sasl_plain_username/password; "
               "'kafka.ssl.truststore.location' (PEM) -> ssl_cafile). Settings kafka-python "
               "does not know are logged and ignored. As in Spark, kafka.auto.offset.reset, "
               "kafka.enable.auto.commit, kafka.key/value.deserializer and "
               "kafka.interceptor.classes are rejected.", is_prefix=True),
    OptionSpec("subscribe", None, "Comma-separated topics to read (one of subscribe, "
               "subscribePattern, assign)."),
    OptionSpec("subscribePattern", None, "Java-style regex of topics to read; new matching topics "
               "are picked up."),
    OptionSpec("assign", None, "JSON {\"topic\":[0,1]}: exact partitions to read."),
    OptionSpec("startingOffsets", "latest", "'earliest', 'latest', 'group' (the consumer "
               "group's committed offsets, see groupOffsetsFallback) or JSON "
               "{\"topic\":{\"0\":23,\"1\":-2}} (-2 earliest, -1 latest). Only for a new query; "
               "a restart resumes from Spark's checkpoint."),
    OptionSpec("startingOffsetsByTimestamp", None, "JSON {\"topic\":{\"0\":1700000000000}}: "
               "start each partition at the first offset whose timestamp >= the value (ms). "
               "Takes precedence over startingOffsets."),
    OptionSpec("startingTimestamp", None, "One timestamp (ms) for every partition; takes "
               "precedence over startingOffsetsByTimestamp and startingOffsets."),
    OptionSpec("startingOffsetsByTimestampStrategy", "error", "When no offset matches the "
               "timestamp: 'error' fails the query, 'latest' starts at the latest offset.",
               kind="choice", choices=("error", "latest")),
    OptionSpec("groupOffsetsFallback", "earliest", "startingOffsets=group: where a partition "
               "without a committed offset starts: 'earliest', 'latest' or 'none' (fail).",
               kind="choice", choices=("earliest", "latest", "none")),
    OptionSpec("maxOffsetsPerTrigger", None, "Upper bound of records per micro-batch, split over "
               "partitions in proportion to their backlog (PySpark ReadMaxRows).",
               kind="int", minimum=1),
    OptionSpec("maxPartitions", None, "Upper bound of Spark tasks reading one micro-batch: the "
               "Kafka partitions' ranges are packed into at most this many input partitions "
               "(about equal records each), a task reading its ranges one after another. "
               "Unset: one task per Kafka partition with data, as Spark's Kafka source. Set it "
               "to the cores reading the topic when it has more partitions than that: every "
               "Python task costs PySpark tens of ms to start, paid per wave of tasks.",
               kind="int", minimum=1),
    OptionSpec("minRecordsPerPartition", None, "Lower bound of records one Spark task reads "
               "(the opposite of Spark's maxRecordsPerPartition): a micro-batch's Kafka ranges "
               "are packed into about its records / this many tasks, at least 1 and at most "
               "maxPartitions when set. A Python task costs PySpark tens of ms however little "
               "it reads, so small batches read faster in one task: 100000 took "
               "barrier-kafka from 0.73x to 1.06x Spark's Kafka source at 10,000-record batches "
               "(medians, docs/operations.md). Unset: one task per Kafka partition with data.",
               kind="int", minimum=1),
    OptionSpec("minOffsetsPerTrigger", None, "Lower bound of records per micro-batch: smaller "
               "backlogs wait, but at most maxTriggerDelay (ignored with Trigger.AvailableNow).",
               kind="int", minimum=1),
    OptionSpec("maxTriggerDelay", "15m", "Longest wait for minOffsetsPerTrigger ('15m', '30s').",
               kind="duration"),
    OptionSpec("failOnDataLoss", "true", "Fail when offsets are gone (retention, deleted topic "
               "or partition); false logs a warning and skips the gap.",
               kind="bool"),
    OptionSpec("includeHeaders", "false", "Add the 'headers' column.",
               kind="bool"),
    OptionSpec("packedKeyGroups", None, "The max_parallelism of the barrier_ops.keyed_process "
               "this stream feeds, keyed by the Kafka 'key': each fetch's records then cross "
               "to Spark as one row of arrays per key group and epoch instead of one row per "
               "record (the key's crc32 mod this, computed where the records are read), which "
               "keyed_process unpacks; the records, their order per key and every guarantee "
               "stay as without it. Only keyed_process reads such rows (sinks and "
               "barrier_ops.passthrough helpers refuse them). Unset: one row per record.",
               kind="int", minimum=1),
    OptionSpec("kafka.group.id", None, "Consumer group that receives the offsets of completed "
               "checkpoints (and is read by startingOffsets=group). Default: "
               "'<groupIdPrefix>-<12 hex of sha1(bootstrap servers|subscription)>'."),
    OptionSpec("groupIdPrefix", "barrier-kafka", "Prefix of the derived group id."),
    OptionSpec("kafkaConsumer.pollTimeoutMs", "120000", "Executor: longest wait (ms) for a "
               "fetch that should return records.",
               kind="int", minimum=1),
    OptionSpec("fetchOffset.numRetries", "3", "Driver: retries of an offset lookup.",
               kind="int"),
    OptionSpec("fetchOffset.retryIntervalMs", "1000", "Driver: wait between those retries (ms).",
               kind="int"),
    OptionSpec("execution.checkpointing.interval", "0", "Trigger a checkpoint when at least this "
               "long (ms or '10s') passed since the previous trigger; 0 = not by time.",
               kind="duration"),
    OptionSpec("execution.checkpointing.interval-batches", "1 if interval unset, else 0",
               "Trigger a checkpoint every N micro-batches with data; 0 = not by count. "
               "Both 0 = checkpoints off (no barrier rows)."),
    OptionSpec("execution.checkpointing.min-pause", "0", "Minimum time (ms or '5s') between the "
               "trigger of one checkpoint and the next.",
               kind="duration"),
    OptionSpec("execution.checkpointing.max-concurrent-checkpoints", "1", "Triggered but not yet "
               "completed checkpoints allowed at once; a due trigger waits.",
               kind="int", minimum=1),
    OptionSpec("execution.checkpointing.idle-seal-after", "the interval, or 10s",
               "When the source has no new data but records after the last barrier wait in "
               "pre-committed sink transactions, trigger a checkpoint with a barrier-only batch "
               "after this long (ms or '10s'), so open transactions never outlive their timeout "
               "in an idle spell; also at the end of a Trigger.AvailableNow run. 0 = never (the "
               "records then wait for new data)."),
    OptionSpec("execution.checkpointing.barrier-placement", PLACEMENT_END, "'end': barrier n at "
               "the end of every partition's range of the batch that triggers n. 'timestamp': a "
               "consistent cut: per partition before the first record with timestamp >= the "
               "trigger time (it may fall mid-batch, or in a later batch for a partition held "
               "back by maxOffsetsPerTrigger).",
               kind="choice", choices=(PLACEMENT_END, PLACEMENT_TIMESTAMP)),
    OptionSpec("checkpoint.storage", None, "Set when a coordinator (2PC sink) completes "
               "checkpoints: the same state-backend path as the sink's. The source then commits "
               "group offsets from '<checkpoint.storage>/_completed_offsets.json' and counts "
               "concurrent checkpoints against it. Unset: source-only mode, a checkpoint is "
               "complete once Spark durably finished the batch carrying its last barrier; the "
               "2PC sinks refuse barriers from a source in that mode or on another storage "
               "(CheckpointStorageMismatchError)."),
    OptionSpec("execution.savepoint.path", None, "Start a new query from a completed checkpoint "
               "or savepoint in checkpoint.storage (Flink's option of that name): 'chk-<n>' (or "
               "n) or 'savepoints/<name>'. Its source offsets are the starting offsets (a "
               "partition it lacks starts as startingOffsets says) and checkpoint numbering "
               "continues at n + 1, as the operators restored with restore_from expect. Needs a "
               "checkpoint.storage no other query used: copy the savepoint in with "
               "CompletedCheckpointStore.copy_savepoint / create_savepoint(target=...)."),
    OptionSpec("s3.", None, "With an s3:// checkpoint.storage: s3.endpoint, s3.region, "
               "s3.access.key, s3.secret.key, as on the sink (secrets never logged).",
               is_secret=True, is_prefix=True),
    OptionSpec("commit.offsets.on.checkpoint", "true", "Commit a completed checkpoint's offsets "
               "to the consumer group (Flink's KafkaSource option).",
               kind="bool"),
]

_STREAM_ONLY_FORBIDDEN = {
    "endingoffsets": "endingOffsets is for batch queries; it is not valid for a stream",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp is for batch queries; it is not "
                                "valid for a stream",
    "endingtimestamp": "endingTimestamp is for batch queries; it is not valid for a stream",
}


def _int(o: Dict[str, str], name: str, default: Optional[int], minimum: int = 0) -> Optional[int]:
    raw = o.get(name.lower())
    if raw is None or raw == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidOptionError(f"Option '{name}' must be an integer; got '{raw}'.") from None
    if value < minimum:
        raise InvalidOptionError(f"Option '{name}' must be >= {minimum}; got {value}.")
    return value


def _json(o: Dict[str, str], name: str) -> Any:
    raw = o.get(name.lower())
    try:
        return json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise InvalidOptionError(f"Option '{name}' is not valid JSON ({exc}); got '{raw}'.") from None


def _partition_map(o: Dict[str, str], name: str, example: str) -> Dict[str, Dict[int, int]]:
    """Parse ``{"topic": {"0": n, ...}}`` into ``{topic: {partition: n}}``."""
    value = _json(o, name)
    if not isinstance(value, dict) or not value:
        raise InvalidOptionError(f"Option '{name}' must be a JSON object like {example}.")
    out: Dict[str, Dict[int, int]] = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            raise InvalidOptionError(f"Option '{name}': topic '{topic}' must map partitions to "
                                     f"numbers, like {example}.")
        out[topic] = {}
        for p, n in parts.items():
            try:
                out[topic][int(p)] = int(n)
            except (TypeError, ValueError):
                raise InvalidOptionError(f"Option '{name}': '{topic}' partition '{p}' -> '{n}' "
                                         f"is not an integer pair, like {example}.") from None
    return out


@dataclass(frozen=True)
class StartingOffsets:
    """Where a new query starts. ``kind``: earliest | latest | group | offsets | timestamp."""

    kind: str
    offsets: Optional[Dict[str, Dict[int, int]]] = None   # kind == offsets (-2 / -1 allowed)
    timestamps: Optional[Dict[str, Dict[int, int]]] = None  # kind == timestamp (per partition)
    timestamp_ms: Optional[int] = None                       # kind == timestamp (global)


def parse_restore_spec(spec: str) -> Tuple[Optional[int], Optional[str]]:
    """``execution.savepoint.path`` -> ``(checkpoint_id, None)`` or ``(None, savepoint_name)``.

    Accepts ``n``, ``chk-<n>`` and ``savepoints/<name>`` (the forms ``keyed_process``'s
    ``restore_from`` takes)."""
    text = str(spec).strip().strip("/")
    match = re.fullmatch(r"(?:chk-)?(\d+)", text)
    if match and int(match.group(1)) > 0:
        return int(match.group(1)), None
    match = re.fullmatch(r"savepoints/([^/]+)", text)
    if match:
        return None, match.group(1)
    raise InvalidOptionError(
        f"Option 'execution.savepoint.path' = {spec!r}: expected a completed checkpoint "
        "('chk-<n>' or n >= 1) or a savepoint ('savepoints/<name>') in checkpoint.storage.")


@dataclass(frozen=True)
class SourceOptions:
    """Every option of the barrier-kafka source, validated. Picklable; secrets hidden in repr."""

    bootstrap_servers: str
    subscribe: Optional[Tuple[str, ...]]
    subscribe_pattern: Optional[str]
    assign: Optional[Dict[str, Tuple[int, ...]]]
    starting: StartingOffsets
    starting_by_timestamp_strategy: str
    group_offsets_fallback: str
    max_offsets_per_trigger: Optional[int]
    max_partitions: Optional[int]
    min_records_per_partition: Optional[int]
    min_offsets_per_trigger: Optional[int]
    max_trigger_delay_ms: int
    fail_on_data_loss: bool
    include_headers: bool
    packed_key_groups: Optional[int]
    group_id: str
    is_group_id_derived: bool
    poll_timeout_ms: int
    fetch_offset_num_retries: int
    fetch_offset_retry_interval_ms: int
    checkpoint_interval_ms: int
    checkpoint_interval_batches: int
    checkpoint_min_pause_ms: int
    max_concurrent_checkpoints: int
    idle_seal_ms: int
    barrier_placement: str
    checkpoint_storage: Optional[str]
    commit_offsets_on_checkpoint: bool
    restore_from: Optional[str] = None
    kafka_config: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)
    storage_options: Dict[str, str] = field(repr=False, compare=False, default_factory=dict)

    @property
    def are_checkpoints_enabled(self) -> bool:
        return self.checkpoint_interval_ms > 0 or self.checkpoint_interval_batches > 0

    @property
    def subscription_description(self) -> str:
        return _describe_subscription(self.subscribe, self.subscribe_pattern, self.assign)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "SourceOptions":
        """Validate ``options`` (Spark's reader options) and return them parsed.

        Raises
        ------
        InvalidOptionError
            Unknown, malformed or conflicting options; the message names the option (never a
            secret value) and, for a misspelling, the closest valid name.
        """
        o = canonical_options(options)
        for key, why in _STREAM_ONLY_FORBIDDEN.items():
            if key in o:
                raise InvalidOptionError(f"Option '{key}': {why}.")
        check_known_options(o, SOURCE_OPTIONS, "barrier-kafka source", ignore=("path",))
        bootstrap = o.get("kafka.bootstrap.servers", "").strip()
        if not bootstrap:
            raise InvalidOptionError("Option 'kafka.bootstrap.servers' is required "
                                     "(e.g. 'host:9092').")

        chosen = [n for n in ("subscribe", "subscribePattern", "assign") if n.lower() in o]
        if len(chosen) != 1:
            raise InvalidOptionError(
                "Exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
                f"set; got {chosen or 'none'}.")
        subscribe = pattern = assign = None
        if "subscribe" in o:
            subscribe = tuple(t.strip() for t in o["subscribe"].split(",") if t.strip())
            if not subscribe:
                raise InvalidOptionError("Option 'subscribe' names no topic.")
        elif "subscribepattern" in o:
            pattern = o["subscribepattern"].strip()
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InvalidOptionError(f"Option 'subscribePattern' is not a valid regex: "
                                         f"{exc}.") from None
            if not pattern:
                raise InvalidOptionError("Option 'subscribePattern' is empty.")
        else:
            raw = _json(o, "assign")
            example = '{"topic":[0,1]}'
            if not isinstance(raw, dict) or not raw or not all(
                    isinstance(v, list) and v and all(isinstance(p, int) for p in v)
                    for v in raw.values()):
                raise InvalidOptionError(f"Option 'assign' must be JSON like {example}; "
                                         f"got '{o['assign']}'.")
            assign = {t: tuple(sorted(set(ps))) for t, ps in raw.items()}

        def opt(name: str):
            return read_option(SOURCE_OPTIONS, o, name)

        starting = cls._parse_starting(o, subscribe, assign)
        max_rows, min_rows = opt("maxOffsetsPerTrigger"), opt("minOffsetsPerTrigger")
        if max_rows is not None and min_rows is not None and min_rows > max_rows:
            raise InvalidOptionError(f"Option 'minOffsetsPerTrigger' ({min_rows}) must not exceed "
                                     f"'maxOffsetsPerTrigger' ({max_rows}).")
        interval_ms = opt("execution.checkpointing.interval")
        batches_default = 1 if "execution.checkpointing.interval" not in o else 0
        interval_batches = _int(o, "execution.checkpointing.interval-batches", batches_default)
        idle_raw = o.get("execution.checkpointing.idle-seal-after")
        idle_seal_ms = (parse_duration_ms("execution.checkpointing.idle-seal-after", idle_raw)
                        if idle_raw is not None else (interval_ms or 10_000))
        storage = o.get("checkpoint.storage", "").strip() or None
        restore_from = o.get("execution.savepoint.path", "").strip() or None
        if restore_from is not None:
            if storage is None:
                raise InvalidOptionError(
                    "Option 'execution.savepoint.path' needs 'checkpoint.storage': the "
                    "checkpoint or savepoint is read from there.")
            parse_restore_spec(restore_from)  # fail early on a malformed value

        prefix = opt("groupIdPrefix") or "barrier-kafka"
        group_id = o.get("kafka.group.id", "").strip()
        derived = not group_id
        if derived:
            described = _describe_subscription(subscribe, pattern, assign)
            digest = hashlib.sha1(f"{bootstrap}|{described}".encode())
            group_id = f"{prefix}-{digest.hexdigest()[:12]}"

        return cls(
            bootstrap_servers=bootstrap, subscribe=subscribe, subscribe_pattern=pattern,
            assign=assign, starting=starting,
            starting_by_timestamp_strategy=opt("startingOffsetsByTimestampStrategy"),
            group_offsets_fallback=opt("groupOffsetsFallback"), max_offsets_per_trigger=max_rows,
            max_partitions=opt("maxPartitions"),
            min_records_per_partition=opt("minRecordsPerPartition"),
            min_offsets_per_trigger=min_rows, max_trigger_delay_ms=opt("maxTriggerDelay"),
            fail_on_data_loss=opt("failOnDataLoss"), include_headers=opt("includeHeaders"),
            packed_key_groups=opt("packedKeyGroups"), group_id=group_id, is_group_id_derived=derived,
            poll_timeout_ms=opt("kafkaConsumer.pollTimeoutMs"),
            fetch_offset_num_retries=opt("fetchOffset.numRetries"),
            fetch_offset_retry_interval_ms=opt("fetchOffset.retryIntervalMs"),
            checkpoint_interval_ms=interval_ms, checkpoint_interval_batches=interval_batches,
            checkpoint_min_pause_ms=opt("execution.checkpointing.min-pause"),
            max_concurrent_checkpoints=opt("execution.checkpointing.max-concurrent-checkpoints"),
            idle_seal_ms=idle_seal_ms,
            barrier_placement=opt("execution.checkpointing.barrier-placement"),
            checkpoint_storage=storage,
            commit_offsets_on_checkpoint=opt("commit.offsets.on.checkpoint"),
            restore_from=restore_from,
            kafka_config=translate_kafka_options(o),
            storage_options={k: v for k, v in o.items() if k.startswith("s3.")},
        )

    @staticmethod
    def _parse_starting(o: Dict[str, str], subscribe, assign) -> StartingOffsets:
        # Spark's precedence: startingTimestamp > startingOffsetsByTimestamp > startingOffsets.
        if "startingtimestamp" in o:
            ts = _int(o, "startingTimestamp", None)
            return StartingOffsets("timestamp", timestamp_ms=ts)
        if "startingoffsetsbytimestamp" in o:
            ts_map = _partition_map(o, "startingOffsetsByTimestamp",
                                    '{"topic":{"0":1700000000000}}')
            _check_topics("startingOffsetsByTimestamp", ts_map, subscribe, assign)
            return StartingOffsets("timestamp", timestamps=ts_map)
        raw = o.get("startingoffsets", "latest").strip()
        if raw.lower() in ("earliest", "latest", "group"):
            return StartingOffsets(raw.lower())
        if not raw.startswith("{"):
            raise InvalidOptionError("Option 'startingOffsets' must be 'earliest', 'latest', "
                                     "'group' or JSON like {\"topic\":{\"0\":23,\"1\":-2}}; got "
                                     f"'{raw}'.")
        offsets = _partition_map(o, "startingOffsets", '{"topic":{"0":23,"1":-2}}')
        for topic, parts in offsets.items():
            for p, n in parts.items():
                if n < -2:
                    raise InvalidOptionError(f"Option 'startingOffsets': {topic} partition {p} "
                                             f"offset {n} is invalid (use >= 0, -2 earliest or "
                                             "-1 latest).")
        _check_topics("startingOffsets", offsets, subscribe, assign)
        return StartingOffsets("offsets", offsets=offsets)


def _describe_subscription(subscribe, pattern, assign) -> str:
    if subscribe:
        return "subscribe=" + ",".join(subscribe)
    if pattern:
        return "subscribePattern=" + pattern
    return "assign=" + json.dumps({t: list(p) for t, p in (assign or {}).items()}, sort_keys=True)


def _check_topics(name: str, given: Dict[str, Dict[int, int]], subscribe, assign) -> None:
    if subscribe is not None:
        extra = sorted(set(given) - set(subscribe))
        if extra:
            raise InvalidOptionError(f"Option '{name}' names topics {extra} that 'subscribe' "
                                     f"does not ({list(subscribe)}).")
    if assign is not None:
        for topic, parts in given.items():
            if topic not in assign or not set(parts) <= set(assign[topic]):
                raise InvalidOptionError(f"Option '{name}' names partitions of '{topic}' that "
                                         "'assign' does not.")


if __name__ == "__main__":  # python -m barrier_source.options > docs/source-options.md
    from barrier_core.option_spec import options_markdown

    print("# barrier-kafka source options\n\nGenerated from "
          "`barrier_source.options.SOURCE_OPTIONS` (`python -m barrier_source.options`); do not "
          "edit by hand. Names are case-insensitive.\n")
    print(options_markdown(SOURCE_OPTIONS))
