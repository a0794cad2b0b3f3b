"""docs/databricks.md's S3 example must start as written on a broker with Kafka's default
``transaction.max.timeout.ms`` (15 minutes): its source options parse, and the sink's
transaction-timeout guard accepts its options with the source's recorded settings."""

import re
from pathlib import Path

from barrier_core.checkpoint_settings import CheckpointSettings
from barrier_sink.options import KafkaSinkOptions
from barrier_source.options import SourceOptions

DOC = Path(__file__).resolve().parents[2] / "docs" / "databricks.md"
KAFKA_DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000
OPTION = re.compile(r'\.option\("([^"]+)",\s*("[^"]*"|[A-Z_]+)\)')


def example_options():
    text = DOC.read_text()
    block = text[text.index("## The S3 state backend"):]
    code = block[block.index("```python") + 9:block.index("```", block.index("```python") + 9)]
    source_part, sink_part = code.split("keyed_process(", 1)
    values = {"BOOTSTRAP": "broker:9092", "STORAGE": "s3://my-bucket/barrier-kafka/x"}

    def opts(part):
        return {k: v.strip('"') if v.startswith('"') else values[v]
                for k, v in OPTION.findall(part)}
    return opts(source_part), opts(sink_part)


def test_the_s3_example_starts_on_a_default_broker():
    source, sink = example_options()
    assert source["execution.checkpointing.interval"] and sink["transactionalIdPrefix"]
    o = SourceOptions.from_options(source)
    settings = CheckpointSettings(o.checkpoint_interval_ms, o.checkpoint_interval_batches,
                                  o.idle_seal_ms, o.checkpoint_min_pause_ms,
                                  o.max_concurrent_checkpoints)
    sink_options = {k: v for k, v in sink.items() if k != "checkpointLocation"}
    opts = KafkaSinkOptions.from_options(sink_options)
    bound = opts.check_against_source(settings)
    opts.check_transaction_timeout(KAFKA_DEFAULT_TRANSACTION_MAX_TIMEOUT_MS, bound)
