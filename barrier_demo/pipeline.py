"""The exactly-once Kafka-to-Kafka pipeline used by the demo and the kill-and-restart tests.

``barrier-kafka`` source -> keyed running count (aligned barriers, keyed state snapshots) ->
two-phase-commit Kafka sink. For every input record with key k the output holds one record
``"k:<i>"`` where i is k's running count: with exactly-once, the output for k is
``k:1 .. k:N_k``, each exactly once, so any lost or duplicated record (input or output) shows.

Runs in the driver process. ``python -m barrier_demo.pipeline`` runs it until every input record
is in a committed checkpoint (or a bound passes), then stops; it is what tests SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from barrier_ops.examples.running_count import OUTPUT_SCHEMA, RunningCount

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class PipelineConfig:
    bootstrap: str
    input_topic: str
    output_topic: str
    workdir: str
    group_id: str
    transactional_id_prefix: str
    max_offsets_per_trigger: int = 50_000
    max_parallelism: int = 16
    checkpoint_every_batches: int = 1
    output_path: Optional[str] = None  # set: write to the barrier-files sink there, not Kafka
    restore_from: Optional[str] = None  # 'chk-<n>' / 'savepoints/<name>' in this storage
    checkpoint_location: Optional[str] = None  # Spark's checkpointLocation as the user spells it
    sink_options: Tuple[Tuple[str, str], ...] = ()  # more options of the 2PC sink
    source_options: Tuple[Tuple[str, str], ...] = ()  # more (or overriding) source options
    incremental_checkpoints: bool = False  # keyed_process writes deltas of the touched keys
    #: keyed_process's ``parallelism`` (ranges of key groups a call; None: one call a key
    #: group) and ``records_format`` ("pandas" or "arrow"): the settings operations.md
    #: recommends are a parallelism equal to the shuffle partitions and "arrow".
    parallelism: Optional[int] = None
    records_format: str = "pandas"
    #: keyed_process's ``runtime_store``: each key group's state between batches in Spark's
    #: state store ("spark") or in the workdir's storage ("backend").
    runtime_store: str = "spark"
    #: The checkpoint storage of the source, the operator and the sink (``checkpoint.storage``,
    #: ``state_backend``): None for ``<workdir>/storage``, or a URI such as ``s3://bucket/x``
    #: with its options (``s3.endpoint`` ...; credentials best from boto3's default chain).
    storage_uri: Optional[str] = None
    storage_options: Tuple[Tuple[str, str], ...] = ()

    @property
    def storage(self) -> str:
        return self.storage_uri or os.path.join(self.workdir, "storage")

    def storage_backend(self):
        """The checkpoint storage as a state backend (driver)."""
        from state_backends.registry import backend_from_uri

        return backend_from_uri(self.storage, dict(self.storage_options))

    @property
    def spark_checkpoint(self) -> str:
        return self.checkpoint_location or os.path.join(self.workdir, "spark-checkpoint")


def start_pipeline(spark, cfg: PipelineConfig, sink: str = "barrier-kafka",
                   trigger_s: Optional[float] = None):
    """Build and start the streaming query (driver); returns the StreamingQuery.

    ``sink="spark-kafka"`` ends the same pipeline in Spark's own (at-least-once) Kafka sink
    instead of the two-phase-commit one (benchmarks; needs spark-sql-kafka-0-10 on the
    classpath).
    """
    from barrier_kafka.spark_checkpoint import clear_dead_first_writes
    from barrier_ops.operator import keyed_process
    from barrier_ops.passthrough import records_only

    # A crash in the first batch's offset-log write would make Spark 4.1+ refuse every restart.
    clear_dead_first_writes(cfg.spark_checkpoint)
    src = (spark.readStream.format("barrier-kafka")
           .option("kafka.bootstrap.servers", cfg.bootstrap)
           .option("subscribe", cfg.input_topic)
           .option("startingOffsets", "earliest")
           .option("kafka.group.id", cfg.group_id)
           .option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
           .option("execution.checkpointing.interval-batches", str(cfg.checkpoint_every_batches))
           .option("checkpoint.storage", cfg.storage))
    for key, value in cfg.storage_options + cfg.source_options:
        src = src.option(key, value)
    if cfg.restore_from:
        src = src.option("execution.savepoint.path", cfg.restore_from)
    counted = keyed_process(src.load(), "key", RunningCount(), OUTPUT_SCHEMA,
                            operator_id="running-count", state_backend=cfg.storage,
                            state_backend_options=dict(cfg.storage_options) or None,
                            max_parallelism=cfg.max_parallelism, restore_from=cfg.restore_from,
                            incremental_checkpoints=cfg.incremental_checkpoints,
                            parallelism=cfg.parallelism, records_format=cfg.records_format,
                            runtime_store=cfg.runtime_store)
    if sink == "spark-kafka":
        writer = (records_only(counted).select("key", "value").writeStream.format("kafka")
                  .option("kafka.bootstrap.servers", cfg.bootstrap)
                  .option("topic", cfg.output_topic))
    elif cfg.output_path:
        writer = (counted.writeStream.format("barrier-files")
                  .option("path", cfg.output_path)
                  .option("checkpoint.storage", cfg.storage))
    else:
        writer = (counted.writeStream.format("barrier-kafka")
                  .option("kafka.bootstrap.servers", cfg.bootstrap)
                  .option("topic", cfg.output_topic)
                  .option("checkpoint.storage", cfg.storage))
        if cfg.transactional_id_prefix:  # else the default, derived from checkpointLocation
            writer = writer.option("transactionalIdPrefix", cfg.transactional_id_prefix)
    if sink != "spark-kafka":
        for key, value in cfg.storage_options + cfg.sink_options:
            writer = writer.option(key, value)
    if trigger_s:
        writer = writer.trigger(processingTime=f"{trigger_s} seconds")
    return (writer.option("checkpointLocation", cfg.spark_checkpoint)
            .queryName(f"barrier-demo-{cfg.group_id}")
            .start())


def input_end_offsets(bootstrap: str, topic: str) -> Dict[str, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        return {str(tp.partition): o for tp, o in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


def completed_offsets(cfg: PipelineConfig):
    """The newest committed checkpoint's offsets (``CompletedOffsets``) or None."""
    from barrier_core.completed_offsets import read_completed_offsets

    return read_completed_offsets(cfg.storage_backend())


def is_caught_up(cfg: PipelineConfig, ends: Dict[str, int]) -> bool:
    """True when the newest committed checkpoint covers every input record and the source
    committed its offsets to the consumer group."""
    from barrier_demo.verify import committed_group_offsets

    done = completed_offsets(cfg)
    if done is None:
        return False
    got = {str(p): o for p, o in done.offsets.get(cfg.input_topic, {}).items()}
    if not all(got.get(p, -1) >= end for p, end in ends.items()):
        return False
    return committed_group_offsets(cfg.bootstrap, cfg.group_id, cfg.input_topic,
                                   ends) == got


def run_until_caught_up(spark, cfg: PipelineConfig, timeout_s: float = 600.0,
                        progress=None, stop_when: Optional[str] = None) -> float:
    """Run the pipeline until every input record is committed, or until the file
    ``stop_when`` exists (then ``query.stop()`` at once, wherever the batch is); returns the
    seconds it took."""
    ends = input_end_offsets(cfg.bootstrap, cfg.input_topic)
    started = time.monotonic()
    query = start_pipeline(spark, cfg)
    try:
        while not is_caught_up(cfg, ends):
            if query.exception() is not None:
                raise query.exception()
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"pipeline did not commit all input within {timeout_s:.0f}s")
            if stop_when is not None and os.path.exists(stop_when):
                break
            if progress is not None:
                progress(completed_offsets(cfg), ends)
            query.awaitTermination(0.5 if stop_when is None else 0.02)
    finally:
        query.stop()
    return time.monotonic() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m barrier_demo.pipeline")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True, help="output topic (Kafka sink)")
    parser.add_argument("--output-path", default=None,
                        help="write Parquet files here with the barrier-files sink instead")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--prefix", required=True,
                        help="transactionalIdPrefix ('' = the sink's default)")
    parser.add_argument("--checkpoint-location", default=None,
                        help="Spark checkpointLocation (default <workdir>/spark-checkpoint)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=50_000)
    parser.add_argument("--shuffle-partitions", type=int, default=2)
    parser.add_argument("--master", default="local[2]",
                        help="Spark master (a spark:// standalone cluster for cluster tests)")
    parser.add_argument("--speculation", action="store_true",
                        help="speculative task attempts (spark.speculation, eager settings)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the Spark session (repeatable), over the ones "
                             "barrier_kafka.recommended_spark_conf() gives, e.g. "
                             "spark.sql.adaptive.streaming.stateless.enabled=true")
    parser.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                        help="another (or overriding) option of the barrier-kafka source "
                             "(repeatable), e.g. kafka.security.protocol=SASL_PLAINTEXT")
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE",
                        help="another option of the 2PC sink (repeatable), e.g. "
                             "execution.checkpointing.timeout=20000")
    parser.add_argument("--incremental-checkpoints", action="store_true",
                        help="the keyed operator checkpoints only the keys touched since the "
                             "previous checkpoint (keyed_process incremental_checkpoints)")
    parser.add_argument("--parallelism", type=int, default=None,
                        help="the keyed operator's parallelism: Spark calls it once a batch "
                             "for each of this many ranges of key groups (keyed_process "
                             "parallelism; a checkpointLocation keeps the value it started "
                             "with)")
    parser.add_argument("--records-format", choices=("pandas", "arrow"), default="pandas",
                        help="how the keyed operator hands each key's records to the "
                             "function (keyed_process records_format)")
    parser.add_argument("--runtime-store", choices=("spark", "backend"), default="spark",
                        help="where the keyed operator keeps each key group's state between "
                             "batches: Spark's state store or the workdir's storage "
                             "(keyed_process runtime_store)")
    parser.add_argument("--storage", default=None, metavar="URI",
                        help="the checkpoint storage of the source, the operator and the sink "
                             "(default <workdir>/storage), e.g. s3://bucket/prefix")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of that storage (repeatable), e.g. "
                             "s3.endpoint=http://127.0.0.1:9000; give S3 credentials through "
                             "boto3's default chain (AWS_ACCESS_KEY_ID ...), not here")
    parser.add_argument("--restore-from", default=None, metavar="PATH",
                        help="start from this checkpoint (chk-<n>) or savepoint "
                             "(savepoints/<name>) of the workdir's storage")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--stop-when", default=None, metavar="FILE",
                        help="tests: query.stop() as soon as FILE exists, wherever the "
                             "batch is, then exit")
    args = parser.parse_args(argv)
    from kafka_harness.spark import build_spark, conf_pairs

    try:
        extra_conf = conf_pairs(args.spark_conf, "--spark-conf")
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.WARNING)
    from barrier_core.faults import record_pipeline_group

    record_pipeline_group()
    conf = {}
    if args.speculation:  # speculate a task as soon as it is clearly slower than its siblings
        conf = {"spark.speculation": "true", "spark.speculation.interval": "200ms",
                "spark.speculation.multiplier": "1.5", "spark.speculation.quantile": "0.5",
                "spark.speculation.minTaskRuntime": "500ms"}
    conf.update(extra_conf)
    spark = build_spark("barrier-demo-pipeline", shuffle_partitions=args.shuffle_partitions,
                        master=args.master, **conf)
    cfg = PipelineConfig(args.bootstrap, args.input, args.output, args.workdir, args.group,
                         args.prefix, args.max_offsets_per_trigger,
                         output_path=args.output_path,
                         checkpoint_location=args.checkpoint_location,
                         sink_options=tuple(tuple(o.split("=", 1)) for o in args.sink_option),
                         source_options=tuple(tuple(o.split("=", 1))
                                              for o in args.source_option),
                         restore_from=args.restore_from, storage_uri=args.storage,
                         storage_options=tuple(tuple(o.split("=", 1))
                                               for o in args.storage_option),
                         incremental_checkpoints=args.incremental_checkpoints,
                         parallelism=args.parallelism, records_format=args.records_format,
                         runtime_store=args.runtime_store)
    took = run_until_caught_up(spark, cfg, args.timeout, stop_when=args.stop_when)
    if args.stop_when is not None and os.path.exists(args.stop_when):
        print(json.dumps({"stopped_after_seconds": round(took, 1)}), flush=True)
    else:
        print(json.dumps({"caught_up_seconds": round(took, 1)}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
