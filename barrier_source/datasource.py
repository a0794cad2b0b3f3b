"""The ``barrier-kafka`` PySpark data source: factory for the stream reader and the
two-phase-commit stream writer.

Instances are created on the driver and pickled to executors; ``__init__`` only stores options.
"""

from __future__ import annotations

from typing import List, Type

from pyspark.sql.datasource import DataSource


class BarrierKafkaDataSource(DataSource):
    """``spark.readStream.format("barrier-kafka")`` (and ``writeStream`` to the Kafka 2PC sink)."""

    @classmethod
    def name(cls) -> str:
        return "barrier-kafka"

    def schema(self):
        from barrier_source.schema import source_schema
        from barrier_source.options import SourceOptions

        return source_schema(include_headers=SourceOptions.from_options(self.options).include_headers)

    def streamReader(self, schema):
        from barrier_source.reader import BarrierKafkaStreamReader

        return BarrierKafkaStreamReader(self.options, schema)

    def streamWriter(self, schema, overwrite):
        """The exactly-once Kafka sink (driver). Spark calls this before every batch's tasks and
        in the commit worker; the first call in a process finishes interrupted commits."""
        from barrier_sink.kafka_sink import KafkaTwoPhaseCommitWriter

        writer = KafkaTwoPhaseCommitWriter(self.options, schema)
        writer.recover_once()
        return writer


class BarrierFilesDataSource(DataSource):
    """``writeStream.format("barrier-files")``: the exactly-once Parquet file sink."""

    @classmethod
    def name(cls) -> str:
        return "barrier-files"

    def streamWriter(self, schema, overwrite):
        from barrier_sink.file_sink import FileTwoPhaseCommitWriter

        writer = FileTwoPhaseCommitWriter(self.options, schema)
        writer.recover_once()
        return writer


def data_sources() -> List[Type[DataSource]]:
    """Every data source class :func:`barrier_source.register` registers."""
    return [BarrierKafkaDataSource, BarrierFilesDataSource]
