"""Options of the two-phase-commit sinks, parsed once on the driver into frozen dataclasses.

Names follow Spark's Kafka sink (``kafka.*``, ``topic``) and Flink's checkpoint / KafkaSink
configuration (``transactionalIdPrefix``, ``execution.checkpointing.*``).
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional

from barrier_sink.exceptions import InvalidOptionError, TransactionTimeoutTooShortError
from barrier_core.option_spec import (OptionSpec, check_known_options, read_option,  # noqa: F401
                                      redact)
from barrier_sink.kip939 import OPTION as TWO_PHASE_OPTION

logger = logging.getLogger(__name__)

# The docs are generated from these lists (barrier_core.option_spec.options_markdown).
COMMON_SINK_OPTIONS: List[OptionSpec] = [
    OptionSpec("checkpoint.storage", "<checkpointLocation>/barrier-checkpoints",
               "State backend URI where checkpoint metadata, sink transaction handles and "
               "statistics are stored: a path, file://, s3://bucket/prefix or memory://name. "
               "Share it with the source (`checkpoint.storage`) and the operators."),
    OptionSpec("execution.checkpointing.interval", "the source's",
               "Not needed: the sink reads the source's checkpoint settings from "
               "checkpoint.storage. If given (ms), it must equal the source's interval."),
    OptionSpec("execution.checkpointing.timeout", "600000",
               "A checkpoint pending this long (ms) is aborted (expired), counted from its "
               "trigger or from the query's restart, whichever is later."),
    OptionSpec("execution.checkpointing.tolerable-failed-checkpoints", "0",
               "Consecutive failed checkpoints tolerated before the query fails."),
    OptionSpec("restart.budget.ms", "240000",
               "How long a crashed query may take to restart: pre-committed transactions must "
               "survive it (transaction-timeout guard)."),
    OptionSpec("state.checkpoints.num-retained", "3",
               "Completed checkpoints kept; older ones are discarded (savepoints never)."),
    OptionSpec("web.checkpoints.history", "10",
               "Statistics (`chk-<n>/_stats.json`) of this many newest checkpoint ids are kept, "
               "failed ones included; older ones are deleted with their folder, so the storage "
               "stays flat however long the job runs (Flink's option of that name)."),
    OptionSpec("s3.", None, "S3 settings of an s3:// checkpoint.storage or output path: "
               "s3.endpoint, s3.region, s3.access.key, s3.secret.key (secrets never logged).",
               is_prefix=True),
]

POOLING, INCREMENTING = "POOLING", "INCREMENTING"
NAMING_STRATEGIES = (POOLING, INCREMENTING)

KAFKA_SINK_OPTIONS: List[OptionSpec] = [
    OptionSpec("kafka.bootstrap.servers", None, "Kafka brokers.", is_required=True),
    OptionSpec("kafka.", None, "Any other Kafka producer setting, translated exactly as on the "
               "source ('kafka.security.protocol' -> security_protocol; "
               "'kafka.sasl.jaas.config' -> sasl_plain_username/password; PEM "
               "'kafka.ssl.truststore.location' -> ssl_cafile). kafka.group.id and "
               "kafka.transactional.id are refused. The sink's producers default to "
               "kafka.retry.backoff.ms 10 (kafka-python waits a full backoff before its "
               "first coordinator request: 100 ms cost ~200 ms per transaction start and per "
               "commit).", is_prefix=True),
    OptionSpec("topic", None, "Topic for every record; overrides a `topic` column as in "
               "Spark's Kafka sink."),
    OptionSpec("transactionalIdPrefix", "barrier-kafka-<hash of checkpointLocation>",
               "Prefix of every transactional.id this sink uses. Queries with different "
               "prefixes never fence each other. A prefix ending with '-r' and eight hex "
               "digits is refused: it reads as another prefix's run tag."),
    OptionSpec("transaction.naming.strategy", "POOLING",
               "POOLING: each sink task attempt reuses a small pool of transactional ids "
               "(`<prefix>-r<run>-p<task>-a<attempt>-s<slot>`, `<run>` a tag of the query "
               "run), an id only once every transaction recorded under it has ended, so the "
               "ids the broker keeps stay bounded however long the job runs (Flink's "
               "TransactionNamingStrategy.POOLING); each restart of the query starts new ids, "
               "which expire after the brokers' transactional.id.expiration.ms. INCREMENTING: a "
               "new id per batch, task attempt and epoch (`<prefix>-b<batch>-p<task>-a<attempt>"
               "-e<epoch>`), the naming of earlier releases."),
    OptionSpec("kafka.transaction.timeout.ms", "900000",
               "Kafka transaction timeout: at least interval + checkpoint timeout + restart "
               "budget, at most the broker's transaction.max.timeout.ms."),
    OptionSpec(TWO_PHASE_OPTION, "false",
               "true: KIP-939 transactions (the Java client's setting of that name). The "
               "broker never aborts them on a timeout, so a query may stay down for any time "
               "and still commit every pre-committed record; kafka.transaction.timeout.ms then "
               "no longer needs to cover the restart budget. Needs brokers with "
               "transaction.two.phase.commit.enable=true (Kafka 4.1 to 4.4: also "
               "unstable.api.versions.enable=true); checked at start.", kind="bool"),
]

FILE_SINK_OPTIONS: List[OptionSpec] = [
    OptionSpec("path", None, "Output folder: a local path, file:// or s3://bucket/prefix.",
               is_required=True),
]

#: Options Spark itself adds to a sink's options.
SPARK_ADDED = ("checkpointLocation", "queryName", "path")


def normalize_location(location: str) -> str:
    """One spelling of a checkpoint location: ``/data/ckpt``, ``/data/ckpt/``,
    ``file:///data/ckpt`` and ``file:/data/ckpt`` are the same place (storage ownership and the
    default transactional-id prefix both use this, so they always agree)."""
    from urllib.parse import urlparse

    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return os.path.abspath(parsed.path if parsed.scheme else location).rstrip("/") or "/"
    return location.rstrip("/")


def _default(specs: List[OptionSpec], name: str) -> Optional[str]:
    return next(s.default for s in specs if s.name == name)


def _int(options: Mapping[str, str], name: str, default: object) -> int:
    raw = _get(options, name)
    raw = default if raw is None else raw
    try:
        value = int(str(raw))
    except ValueError:
        raise InvalidOptionError(f"Option '{name}' must be an integer, got {raw!r}.") from None
    if value < 0:
        raise InvalidOptionError(f"Option '{name}' must be >= 0, got {value}.")
    return value


def _check_unknown(options: Mapping[str, str], specs: List[OptionSpec], component: str) -> None:
    check_known_options(options, specs, component, ignore=SPARK_ADDED)


def _get(options: Mapping[str, str], name: str) -> Optional[str]:
    """Spark lower-cases option keys on some paths: look up case-insensitively."""
    if name in options:
        return options[name]
    lowered = name.lower()
    for k, v in options.items():
        if k.lower() == lowered:
            return v
    return None


def kafka_client_config(options: Mapping[str, str]) -> Dict[str, object]:
    """``kafka.*`` options as kafka-python keyword arguments, translated exactly as the source
    translates them (``kafka.sasl.jaas.config`` -> ``sasl_plain_username``/``password``,
    ``kafka.security.protocol`` -> ``security_protocol`` ...), for the producer and admin
    clients the sink uses."""
    from barrier_core.kafka_config import translate_kafka_options

    for name in options:
        key = name.lower()
        if key in ("kafka.group.id", "kafka.transactional.id"):
            raise InvalidOptionError(
                f"Option '{name}' is not allowed on the sink: the transactional.id is built "
                "from 'transactionalIdPrefix'.")
    own = ("kafka.transaction.timeout.ms", TWO_PHASE_OPTION)
    conf = translate_kafka_options(
        {k: v for k, v in options.items() if k.lower() not in own},
        clients=("producer", "admin"))
    if not conf.get("bootstrap_servers"):
        raise InvalidOptionError("Option 'kafka.bootstrap.servers' is required by the "
                                 "barrier-kafka sink.")
    return conf


@dataclass(frozen=True)
class CheckpointSinkOptions:
    """Options every 2PC sink shares (driver; pickled to executors)."""

    checkpoint_location: str
    storage_uri: str
    interval_ms: Optional[int]  # given on the sink (None: take the source's)
    checkpoint_timeout_ms: int
    tolerable_failures: int
    restart_budget_ms: int
    num_retained: int
    stats_history: int
    storage_options: Dict[str, str] = field(repr=False, default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "CheckpointSinkOptions":
        location = _get(options, "checkpointLocation")
        storage = _get(options, "checkpoint.storage")
        if not storage:
            if not location:
                raise InvalidOptionError(
                    "The barrier-kafka sinks need option 'checkpointLocation' (or "
                    "'checkpoint.storage'): completed checkpoints and pre-committed "
                    "transactions are recorded there.")
            storage = normalize_location(location) + "/barrier-checkpoints"
        lowered = {k.lower(): v for k, v in options.items()}

        def num(name: str) -> int:
            return _int(options, name, _default(COMMON_SINK_OPTIONS, name))

        return cls(
            checkpoint_location=location or storage,
            storage_uri=storage,
            interval_ms=(_int(options, "execution.checkpointing.interval", 0)
                         if _get(options, "execution.checkpointing.interval") is not None
                         else None),
            checkpoint_timeout_ms=num("execution.checkpointing.timeout"),
            tolerable_failures=num("execution.checkpointing.tolerable-failed-checkpoints"),
            restart_budget_ms=num("restart.budget.ms"),
            num_retained=num("state.checkpoints.num-retained"),
            stats_history=max(1, num("web.checkpoints.history")),
            storage_options={k: v for k, v in lowered.items() if k.startswith("s3.")},
        )

    def open_backend(self):
        from state_backends.registry import backend_from_uri

        return backend_from_uri(self.storage_uri, self.storage_options)


@dataclass(frozen=True)
class KafkaSinkOptions:
    """Options of the exactly-once Kafka sink (``writeStream.format("barrier-kafka")``)."""

    checkpoint: CheckpointSinkOptions
    topic: Optional[str]
    transactional_id_prefix: str
    transaction_timeout_ms: int
    kafka: Dict[str, object] = field(repr=False, default_factory=dict)
    naming_strategy: str = POOLING
    two_phase_commit: bool = False  # KIP-939 transactions (barrier_sink.kip939)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "KafkaSinkOptions":
        _check_unknown(options, COMMON_SINK_OPTIONS + KAFKA_SINK_OPTIONS, "barrier-kafka sink")
        checkpoint = CheckpointSinkOptions.parse(options)
        prefix = _get(options, "transactionalIdPrefix")
        if not prefix:
            location = normalize_location(checkpoint.checkpoint_location)
            digest = hashlib.sha1(location.encode()).hexdigest()[:12]
            prefix = f"barrier-kafka-{digest}"
        check_prefix(prefix)
        timeout = _int(options, "kafka.transaction.timeout.ms",
                       _default(KAFKA_SINK_OPTIONS, "kafka.transaction.timeout.ms"))
        naming = (_get(options, "transaction.naming.strategy") or POOLING).upper()
        if naming not in NAMING_STRATEGIES:
            raise InvalidOptionError(
                f"Option 'transaction.naming.strategy' must be one of {list(NAMING_STRATEGIES)}, "
                f"got {_get(options, 'transaction.naming.strategy')!r}.")
        two_phase = read_option(KAFKA_SINK_OPTIONS, {k.lower(): v for k, v in options.items()},
                                TWO_PHASE_OPTION)
        opts = cls(checkpoint, _get(options, "topic"), prefix, timeout,
                   kafka_client_config(options), naming, two_phase)
        opts.check_transaction_timeout()
        return opts

    def check_transaction_timeout(self, broker_max_ms: Optional[int] = None,
                                  seal_bound_ms: Optional[int] = None) -> None:
        """The transaction-timeout guard (driver, at start).

        A pre-committed transaction must outlive the longest time until its checkpoint's commit:
        the longest wait for the next barrier (``seal_bound_ms``: the source's interval or idle
        seal, read from checkpoint.storage; before that is known, the sink's own interval
        option), the checkpoint timeout to complete it, and the restart budget when a crash
        comes between completion and commit. If Kafka aborts the transaction first, its records
        are lost: so refuse to start instead. KIP-939 transactions have no timeout: only the
        brokers' maximum applies to them.
        """
        c = self.checkpoint
        wait = seal_bound_ms if seal_bound_ms is not None else (c.interval_ms or 0)
        needed = wait + c.checkpoint_timeout_ms + c.restart_budget_ms
        if self.transaction_timeout_ms < needed and not self.two_phase_commit:
            raise TransactionTimeoutTooShortError(
                f"Option 'kafka.transaction.timeout.ms' = {self.transaction_timeout_ms} is "
                f"shorter than the longest wait for a barrier ({wait}: the source's "
                "execution.checkpointing.interval or idle-seal-after) + "
                f"execution.checkpointing.timeout ({c.checkpoint_timeout_ms}) + "
                f"restart.budget.ms ({c.restart_budget_ms}) = {needed} ms: Kafka could abort "
                "a pre-committed transaction before its checkpoint commits it, losing data. "
                f"Raise kafka.transaction.timeout.ms to at least {needed} or lower the others.")
        if broker_max_ms is not None and self.transaction_timeout_ms > broker_max_ms:
            raise TransactionTimeoutTooShortError(
                f"Option 'kafka.transaction.timeout.ms' = {self.transaction_timeout_ms} exceeds "
                f"the broker's transaction.max.timeout.ms = {broker_max_ms}; the broker would "
                "refuse every transaction. Lower it, or raise transaction.max.timeout.ms on the "
                "brokers.")

    def check_against_source(self, settings) -> Optional[int]:
        """Compare with the source's recorded :class:`CheckpointSettings` (driver, at start);
        returns the seal bound the guard must use. A contradicting sink-side interval is an
        error: two copies of one setting must not disagree."""
        given = self.checkpoint.interval_ms
        if given is not None and given != settings.interval_ms:
            raise InvalidOptionError(
                f"Option 'execution.checkpointing.interval' = {given} on the barrier-kafka sink "
                f"contradicts the source's {settings.interval_ms} ms (read from "
                f"{self.checkpoint.storage_uri}). The source decides when checkpoints trigger: "
                "set the interval on the source only and drop it from the sink.")
        if settings.seal_bound_ms is None and not self.two_phase_commit:
            logger.warning(
                "barrier-kafka sink: the source counts checkpoints in batches and its "
                "execution.checkpointing.idle-seal-after is 0: records after the last barrier "
                "wait for new data without bound, and an idle spell longer than "
                "kafka.transaction.timeout.ms (%d ms) loses them. Set idle-seal-after on the "
                "source.", self.transaction_timeout_ms)
        return settings.seal_bound_ms

    def transactional_id(self, batch_id: int, partition_id: int,
                         checkpoint_id: Optional[int], attempt: int = 0) -> str:
        """``<prefix>-b<batch>-p<task>-a<attempt>-e<epoch>``: one id per task attempt, so a
        speculative or retried attempt never fences another attempt's transaction."""
        epoch = "n" if checkpoint_id is None else str(checkpoint_id)
        return (f"{self.transactional_id_prefix}-b{batch_id}-p{partition_id}-a{attempt}"
                f"-e{epoch}")

    def pooled_transactional_id(self, partition_id: int, attempt: int, slot: int,
                                run_tag: Optional[str] = None) -> str:
        """``<prefix>-r<run>-p<task>-a<attempt>-s<slot>``: slot ``slot`` of the id pool of one
        task attempt of query run ``run_tag`` (``transaction.naming.strategy`` POOLING,
        :mod:`barrier_sink.id_pool`); without a run (outside a Spark task) no ``-r`` part."""
        run = f"-r{run_tag}" if run_tag else ""
        return f"{self.transactional_id_prefix}{run}-p{partition_id}-a{attempt}-s{slot}"

    @property
    def two_phase_check_id(self) -> str:
        """``<prefix>-2pc-check``: the id the start check initialises; it never holds a
        transaction (``kafka.transaction.two.phase.commit.enable``)."""
        return f"{self.transactional_id_prefix}-2pc-check"

    @property
    def pooled(self) -> bool:
        return self.naming_strategy == POOLING


#: The end of a prefix that reads as another prefix's run tag (``-r`` and eight hex digits).
_RUN_TAG_END = r"-r[0-9a-f]{8}"


def check_prefix(prefix: str) -> None:
    """Refuse a ``transactionalIdPrefix`` ending like a run tag, ``-r`` and eight hex digits.

    A pooled id is ``<prefix>[-r<run>]-p<task>-a<attempt>-s<slot>``, so the ids of prefix
    ``orders-r0123abcd`` made without a run tag (a platform that names no run, or a tool) are also
    ids of prefix ``orders`` with run ``0123abcd``. The sink of ``orders`` would take them for its
    own and its sweep would fence and abort their open transactions, pre-committed ones included,
    losing that query's batch; and the sink of ``orders-r0123abcd`` would claim the ids of a run
    of ``orders`` whose tag is ``0123abcd``. With such prefixes refused, the pooled ids of two
    different prefixes never coincide (tests/sink/test_id_pool.py checks that)."""
    import re

    if re.search(_RUN_TAG_END + r"\Z", prefix):
        raise InvalidOptionError(
            f"Option 'transactionalIdPrefix' must not end with '-r' and eight hex digits "
            f"(got {prefix!r}): the sink's pooled transactional ids put a query run's tag of "
            f"that form after the prefix, so a query with the prefix {prefix[:-10]!r} would "
            f"take this query's ids for its own and abort its open transactions. Choose a "
            f"prefix that ends otherwise, e.g. {prefix + '-sink'!r}.")


def is_sink_transactional_id(prefix: str, transactional_id: str) -> bool:
    """True if the sink with ``transactionalIdPrefix`` = ``prefix`` made ``transactional_id``
    (pooled ``<prefix>[-r<run>]-p<task>-a<attempt>-s<slot>``, incrementing
    ``<prefix>-b<batch>-p<partition>-a<attempt>-e<epoch>``, or the attempt-less form of 0.1).
    Exact, not a string prefix: the sink of prefix ``orders`` never claims the transactions of
    a query whose prefix is ``orders-eu``."""
    return (transactional_id_batch(prefix, transactional_id) is not None
            or is_pooled_transactional_id(prefix, transactional_id))


def is_pooled_transactional_id(prefix: str, transactional_id: str) -> bool:
    """True for an id of this prefix's pool (``<prefix>[-r<run>]-p<task>-a<attempt>-s<slot>``,
    ``<run>`` eight hex characters)."""
    import re

    pattern = rf"{re.escape(prefix)}({_RUN_TAG_END})?-p\d+-a\d+-s\d+"
    return re.fullmatch(pattern, transactional_id) is not None


def transactional_id_batch(prefix: str, transactional_id: str) -> Optional[int]:
    """The micro-batch of a transactional.id this sink made, else None."""
    import re

    pattern = rf"{re.escape(prefix)}-b(\d+)-p\d+(-a\d+)?-e(\d+|n)"
    m = re.fullmatch(pattern, transactional_id)
    return int(m.group(1)) if m else None
