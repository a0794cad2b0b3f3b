"""Every public method of the classes Spark calls into, and of the driver-side protocol classes,
says where it runs (driver planner worker, driver commit worker, executor), as PySpark's own
``datasource.py`` does (issue 11). Docstrings inherited from a base class count."""

from __future__ import annotations

import inspect
import re

import pytest

from barrier_coordinator.coordinator import CheckpointCoordinator
from barrier_kafka.datasource import BarrierFilesDataSource, BarrierKafkaDataSource
from barrier_sink.committer import SinkCommitter
from barrier_sink.file_sink import FileSinkCommitter, FileTwoPhaseCommitWriter
from barrier_sink.kafka_sink import KafkaSinkCommitter, KafkaTwoPhaseCommitWriter
from barrier_source.kafka_metadata import KafkaMetadata
from barrier_source.reader import BarrierKafkaStreamReader

WHERE = re.compile(r"\b(driver|executors?|anywhere)\b", re.I)
CLASSES = [BarrierKafkaDataSource, BarrierFilesDataSource, BarrierKafkaStreamReader,
           KafkaMetadata, KafkaTwoPhaseCommitWriter, FileTwoPhaseCommitWriter, SinkCommitter,
           KafkaSinkCommitter, FileSinkCommitter, CheckpointCoordinator]


def _public_methods(cls):
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") or not (inspect.isfunction(member) or isinstance(
                inspect.getattr_static(cls, name), property)):
            continue
        if not any(name in vars(k) for k in cls.__mro__ if k.__module__.split(".")[0] in (
                "barrier_kafka", "barrier_source", "barrier_sink", "barrier_coordinator")):
            continue  # inherited from PySpark or object, not ours
        yield name


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_public_methods_say_where_they_run(cls):
    silent = [name for name in _public_methods(cls)
              if not WHERE.search(inspect.getdoc(getattr(cls, name)) or "")]
    assert silent == [], f"{cls.__name__}: say where these run: {silent}"
