"""What the driver's short-lived Python workers load when a query is defined and started.

PySpark defines and plans a query with Python data sources in several fresh Python workers,
among them ``create_data_source`` (the source's schema) and ``plan_data_source_read`` (the stream
reader, pickled for the tasks), new processes at every query start. kafka-python costs 120-190 ms
to import on this machine and neither talks to Kafka, so neither may import it when the options
name no Kafka client setting; translating the sink's options does not import it either. (The
source's planner, the sink's writer worker, which checks the brokers' transaction timeout at
start, and its commit worker do talk to Kafka, and executors' readers and writers create
clients, so they import it anyway.) The step that only asks for the schema does not load the
reader either, nor numpy with it (about 55 ms); nor does loading the sink's writer, which the
sink's planner and commit worker do. Each step is checked for what it loads beyond
PySpark's own ``pyspark.sql.datasource``, which loads numpy itself on PySpark 4.0 and 4.1.
"""

from __future__ import annotations

import json

import pytest

from barrier_core.exceptions import InvalidOptionError
from tests.core.fresh_interpreter import run_python

SOURCE = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
          "checkpoint.storage": "/tmp/never-written"}
SINK = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "out",
        "checkpoint.storage": "/tmp/never-written", "transactionalIdPrefix": "p"}


def _loaded_after(step: str) -> list:
    code = f"""
        import json, sys
        import pyspark.sql.datasource  # PySpark's own (4.0 and 4.1 load numpy with it)
        before = set(sys.modules)
        from barrier_kafka.datasource import BarrierKafkaDataSource
        source = BarrierKafkaDataSource({SOURCE!r})
        step = {step!r}
        if step == "schema":
            source.schema()
        elif step == "reader":
            source.streamReader(source.schema())
        elif step == "sink writer class":
            from barrier_sink.kafka_sink import KafkaTwoPhaseCommitWriter
        else:
            from barrier_sink.options import KafkaSinkOptions
            KafkaSinkOptions.from_options({SINK!r})
        print(json.dumps(sorted(m for m in set(sys.modules) - before
                                if m in ("kafka", "numpy", "barrier_source.reader"))))
    """
    return json.loads(run_python(code).splitlines()[-1])


@pytest.mark.parametrize("step", ["schema", "reader", "sink options"])
def test_defining_and_planning_a_query_does_not_import_kafka_python(step):
    assert "kafka" not in _loaded_after(step)


def test_asking_for_the_schema_loads_neither_the_reader_nor_numpy():
    assert _loaded_after("schema") == []


def test_the_sinks_driver_workers_load_no_numpy():
    # The sink's planner and its commit worker load the writer's module to recover and commit;
    # numpy (about 55 ms a process) is for the executors' record encoding only.
    assert "numpy" not in _loaded_after("sink writer class")


def test_kafka_settings_are_still_checked_and_typed_against_kafka_python():
    from barrier_core.kafka_config import translate_kafka_options

    cfg = translate_kafka_options({"kafka.bootstrap.servers": "a:1,b:2",
                                   "kafka.request.timeout.ms": "1234",
                                   "kafka.no.such.setting": "x"})
    assert cfg == {"bootstrap_servers": ["a:1", "b:2"], "request_timeout_ms": 1234}
    with pytest.raises(InvalidOptionError, match="must be an integer"):
        translate_kafka_options({"kafka.request.timeout.ms": "soon"})
