"""The exactly-once Parquet file sink on real Spark, local disk and the S3 server: files of a
checkpoint appear only once it completes, each record once; staged files of an incomplete
checkpoint stay invisible; a replayed batch publishes nothing twice."""

from __future__ import annotations

from collections import Counter

import pytest

from barrier_demo.verify import read_published_files
from barrier_ops.testing import ScriptDataSource, write_script
from barrier_sink.file_sink import published_files
from barrier_sink.file_store import file_store_from_path
from integration_tests.sink_support import run_script_to_sink, sealed_script


@pytest.fixture(scope="module")
def script_source(spark):
    spark.dataSource.register(ScriptDataSource)


def run_files(spark, script_path, path, chk, **options):
    run_script_to_sink(spark, script_path, "barrier-files", chk, path=path, **options)


def test_local_files_published_exactly_once(spark, script_source, tmp_path):
    script = sealed_script(seed=3, partitions=2, records=50, checkpoints=2, batches=3)
    path = str(tmp_path / "out")
    run_files(spark, write_script(script, str(tmp_path / "s.json")), path, str(tmp_path / "chk"))
    files = published_files(path)
    assert files and all(f.endswith(".parquet") for f in files)
    assert Counter(read_published_files(path)) == Counter(r["value"].encode()
                                                          for r in script["records"])
    assert file_store_from_path(path, {}).list("_staging/") == []  # nothing left staged
    # Spark's own reader sees exactly the published files (staging is '_'-prefixed).
    assert spark.read.parquet(path).count() == len(script["records"])


def test_incomplete_checkpoint_stays_staged_and_invisible(spark, script_source, tmp_path):
    script = sealed_script(seed=5, partitions=2, records=30, checkpoints=1, batches=2)
    script["batches"][-1] = [r for r in script["batches"][-1]
                             if not (r["kind"] == "barrier" and r["checkpoint_id"] == 2
                                     and r["partition"] == 0)]
    path = str(tmp_path / "out")
    run_files(spark, write_script(script, str(tmp_path / "s.json")), path, str(tmp_path / "chk"))
    store = file_store_from_path(path, {})
    visible = Counter(read_published_files(path))
    assert visible == Counter(r["value"].encode() for r in script["records"]
                              if r["checkpoint_id"] <= 1)
    assert store.list("_staging/"), "epoch 2 must stay staged until checkpoint 2 completes"


def test_s3_files_published_exactly_once(spark, script_source, tmp_path, s3_server, s3_bucket):
    script = sealed_script(seed=9, partitions=2, records=40, checkpoints=2, batches=3)
    s3 = {"s3.endpoint": s3_server.endpoint_url, "s3.access.key": s3_server.access_key,
          "s3.secret.key": s3_server.secret_key, "s3.region": s3_server.region}
    path = f"s3://{s3_bucket}/events"
    run_files(spark, write_script(script, str(tmp_path / "s.json")), path,
              str(tmp_path / "chk"), **s3)
    files = published_files(path, s3)
    assert files and all(f.startswith(f"s3://{s3_bucket}/events/part-") for f in files)
    assert Counter(read_published_files(path, s3)) == Counter(r["value"].encode()
                                                              for r in script["records"])
    assert file_store_from_path(path, s3).list("_staging/") == []
