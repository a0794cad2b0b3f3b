"""Fixtures shared by the integration tests (the broker, Spark and S3 ones come from the
project's pytest plugin, ``kafka_harness.pytest_plugin``)."""

from __future__ import annotations

import pytest

from barrier_ops.testing import ScriptDataSource


@pytest.fixture(scope="module")
def script_spark(spark):
    """The session's Spark with the scripted barrier source (``barrier-ops-script``)
    registered."""
    spark.dataSource.register(ScriptDataSource)
    return spark
