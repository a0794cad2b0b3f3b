"""The PySpark data sources of the plugin: ``barrier-kafka`` (the source's stream reader and the
exactly-once Kafka sink's writer, one short name as Spark's own Kafka connector) and
``barrier-files``.

Instances are created on the driver and pickled to executors; ``__init__`` only stores options.
This module sits above the source and the sinks, so neither imports the other.
"""

from __future__ import annotations

from typing import List, Type

from pyspark.sql.datasource import DataSource

from barrier_core.packed_source import packed_schema
from barrier_core.schema import source_schema
from barrier_core.jar_archives import keep_jar_directories
from barrier_core.worker_heap import freeze_in_python_worker
from barrier_source.options import SourceOptions


class BarrierKafkaDataSource(DataSource):
    """``spark.readStream.format("barrier-kafka")`` (and ``writeStream`` to the Kafka 2PC sink)."""

    @classmethod
    def name(cls) -> str:
        """Short name of ``format("barrier-kafka")`` (driver, at registration)."""
        return "barrier-kafka"

    def schema(self):
        """The source's row schema (driver: the user's process, when the query is defined): one
        row per record, or with ``packedKeyGroups`` the packed layout
        (:mod:`barrier_core.packed_source`)."""
        opts = SourceOptions.from_options(self.options)
        flat = source_schema(include_headers=opts.include_headers)
        if opts.packed_key_groups is None:
            return flat
        return packed_schema(flat, opts.packed_key_groups)

    def streamReader(self, schema):
        """The stream reader (driver planner worker; Spark pickles it to executors for ``read``).
        Imported here, not with the module: the worker that only asks for the schema
        (``create_data_source``) then skips the reader and numpy, the sink's workers the
        reader."""
        from barrier_source.reader import BarrierKafkaStreamReader

        return BarrierKafkaStreamReader(self.options, schema)

    def streamWriter(self, schema, overwrite):
        """The exactly-once Kafka sink (driver). Spark calls this before every batch's tasks and
        in the commit worker; the first call in a process finishes interrupted commits, then
        freezes that Python worker's heap (:func:`_writer_ready`). Imported here, not with
        the module: the source's planner worker, a fresh Python process PySpark starts before
        a query's first trigger, then loads only the source."""
        from barrier_sink.kafka_sink import KafkaTwoPhaseCommitWriter

        return _writer_ready(KafkaTwoPhaseCommitWriter(self.options, schema))


class BarrierFilesDataSource(DataSource):
    """``writeStream.format("barrier-files")``: the exactly-once Parquet file sink."""

    @classmethod
    def name(cls) -> str:
        """Short name of ``format("barrier-files")`` (driver, at registration)."""
        return "barrier-files"

    def streamWriter(self, schema, overwrite):
        """The exactly-once Parquet writer (driver: before each batch's tasks and in the commit
        worker; the first call in a process finishes interrupted commits, as for Kafka)."""
        from barrier_sink.file_sink import FileTwoPhaseCommitWriter

        return _writer_ready(FileTwoPhaseCommitWriter(self.options, schema))


def _writer_ready(writer):
    """``writer`` after its recovery check, in a driver-side Python worker whose heap is then
    frozen (driver planner worker and commit worker): PySpark runs a full garbage collection
    after each of these calls, which walked 2-3 s of a 35 s ``bench_pipeline`` run in each of
    the two workers and takes about 0.1 s once the heap the first call loaded (the sink, its
    Kafka client, PySpark) is frozen (:mod:`barrier_core.worker_heap`; nothing is frozen in a
    user's own process)."""
    writer.recover_once()
    freeze_in_python_worker()
    keep_jar_directories()
    return writer


def data_sources() -> List[Type[DataSource]]:
    """Every data source class :func:`barrier_kafka.register` registers."""
    return [BarrierKafkaDataSource, BarrierFilesDataSource]
