"""The standalone cluster harness when a port it picked is taken before its master binds it (by a
parallel test worker's broker or Spark driver): the master must not move to a port its workers
were not given, and the cluster still comes up (a real master and worker)."""

from __future__ import annotations

import logging
import socket

from kafka_harness import spark_cluster
from kafka_harness.spark_cluster import StandaloneCluster


def test_the_cluster_comes_up_when_the_master_port_was_taken_after_it_was_picked(
        tmp_path, monkeypatch, caplog):
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(8)   # accepts connections and answers nothing, as another service would
    taken = squatter.getsockname()[1]
    picks = iter([taken])
    real = spark_cluster._free_port
    monkeypatch.setattr(spark_cluster, "_free_port", lambda: next(picks, None) or real())
    cluster = StandaloneCluster(workers=1, cores=1, memory="512m", work_dir=str(tmp_path))
    assert cluster.port == taken
    try:
        with caplog.at_level(logging.WARNING, logger=spark_cluster.__name__):
            cluster.start(timeout_s=90)
        assert cluster.port != taken
        assert cluster._alive_workers() == 1
        assert [r for r in caplog.records if "exited on ports" in r.getMessage()]
    finally:
        cluster.stop()
        squatter.close()
