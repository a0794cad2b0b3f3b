"""``barrier_kafka.spark_settings``: which Spark settings the library recommends for a release,
which of them a session lacks, and the one INFO line ``register`` logs about them (no Spark
here: sessions are stand-ins; ``kafka_harness.spark.build_spark`` builds every real session of
the suite with them)."""

from __future__ import annotations

import logging

import pytest

import barrier_kafka
from barrier_kafka import spark_settings
from barrier_kafka.spark_settings import (AQE, STATELESS_AQE, UNIX_SOCKETS, log_missing_once,
                                          missing_recommended, recommended_spark_conf)
from benchmarks.bench_source import session_conf


class _Conf:
    def __init__(self, values):
        self._values = values

    def get(self, key, default=None):
        return self._values.get(key, default)


class _Context:
    def __init__(self, values):
        self._values = values

    def getConf(self):
        return _Conf(self._values)


class _Session:
    """A session started with ``values``; its SQL settings (``spark.sql.*``) are those of them
    and ``sql``, as ``spark.conf.set`` leaves them on a running session."""

    def __init__(self, version, sql=None, **values):
        self.version = version
        self.sparkContext = _Context(values)
        self.conf = _Conf({**{k: v for k, v in values.items() if k.startswith("spark.sql.")},
                           **(sql or {})})


#: every recommended setting of Spark 4.1+, as a session built with them has them
ALL = {UNIX_SOCKETS: "true", STATELESS_AQE: "false"}


class _ServerConf(_Conf):
    """``spark.conf`` of a Spark Connect client: the server session's settings, which hold the
    ones the server started with; ``hidden`` ones raise, as Databricks serverless answers a
    setting a client may not read."""

    def __init__(self, values, hidden=()):
        super().__init__(values)
        self._hidden = hidden

    def get(self, key, default=None):
        if key in self._hidden:
            raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] Configuration {key} is not available.")
        return super().get(key, default)


class _ConnectSession:
    version = "4.1.4"

    def __init__(self, hidden=(), **server_values):
        self.conf = _ServerConf(server_values, hidden)

    @property
    def sparkContext(self):
        raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext is not supported")


@pytest.mark.parametrize("version", ["4.1.0", "4.1.4", "4.2.1", "4.3.0", "4.3.0.dev1", "5.0.0"])
def test_releases_with_unix_sockets_get_them(version):
    """... and adaptive execution of stateless streams off, which the same releases brought."""
    assert recommended_spark_conf(version) == {UNIX_SOCKETS: "true", STATELESS_AQE: "false"}


@pytest.mark.parametrize("version", ["3.5.3", "4.0.0", "4.0.5", "4.0.5rc1"])
def test_releases_without_them_get_nothing(version):
    assert recommended_spark_conf(version) == {}


def test_the_installed_pyspark_is_the_default():
    import pyspark

    assert recommended_spark_conf() == recommended_spark_conf(pyspark.__version__)
    assert barrier_kafka.recommended_spark_conf is recommended_spark_conf


def test_a_session_without_the_settings_misses_them():
    assert missing_recommended(_Session("4.3.0")) == [UNIX_SOCKETS, STATELESS_AQE]
    assert missing_recommended(_Session("4.3.0", **{UNIX_SOCKETS: "false"})) == [
        UNIX_SOCKETS, STATELESS_AQE]
    assert missing_recommended(_Session("4.3.0", **{UNIX_SOCKETS: "true"})) == [STATELESS_AQE]
    assert missing_recommended(_Session("4.3.0", **{STATELESS_AQE: "false"})) == [UNIX_SOCKETS]


def test_a_session_with_the_settings_misses_nothing():
    assert missing_recommended(_Session("4.3.0", **ALL)) == []
    assert missing_recommended(_Session("4.3.0", **{UNIX_SOCKETS: " TRUE ",
                                                    STATELESS_AQE: "False"})) == []


def test_the_sql_setting_counts_as_the_session_has_it_now():
    """Adaptive execution is a SQL setting: a query reads it at its start, so one set on the
    running session (``spark.conf.set``) counts, and one unset there again does not."""
    started_with = {UNIX_SOCKETS: "true", STATELESS_AQE: "false"}
    assert missing_recommended(_Session("4.3.0", sql={STATELESS_AQE: "true"},
                                        **started_with)) == [STATELESS_AQE]
    assert missing_recommended(_Session("4.3.0", sql={STATELESS_AQE: "false"},
                                        **{UNIX_SOCKETS: "true"})) == []


def test_adaptive_execution_off_altogether_has_the_same_effect():
    assert missing_recommended(_Session("4.3.0", **{UNIX_SOCKETS: "true", AQE: "false"})) == []
    assert missing_recommended(_Session("4.3.0", **{UNIX_SOCKETS: "true", AQE: "true"})) == [
        STATELESS_AQE]


def test_an_older_release_misses_nothing():
    assert missing_recommended(_Session("4.0.5")) == []


def test_a_spark_connect_client_reads_the_servers_settings():
    """A Connect client (Databricks shared and serverless compute) has no SparkContext; the
    server's session shows both settings (checked against a real server started by
    ``kafka_harness.spark_connect``: ``spark.conf.get`` returned the values it started with)."""
    assert missing_recommended(_ConnectSession()) == [UNIX_SOCKETS, STATELESS_AQE]
    assert missing_recommended(_ConnectSession(**ALL)) == []
    assert missing_recommended(_ConnectSession(**{UNIX_SOCKETS: "true"})) == [STATELESS_AQE]
    assert missing_recommended(_ConnectSession(**{UNIX_SOCKETS: "true", AQE: "false"})) == []


def test_a_setting_the_server_will_not_show_is_not_reported():
    assert missing_recommended(_ConnectSession(hidden=(UNIX_SOCKETS,))) == [STATELESS_AQE]
    assert missing_recommended(_ConnectSession(hidden=(UNIX_SOCKETS, STATELESS_AQE))) == []


def test_the_hint_is_logged_once_naming_the_setting(monkeypatch, caplog):
    monkeypatch.setattr(spark_settings, "_hinted", False)
    caplog.set_level(logging.INFO, logger="barrier_kafka.spark_settings")
    log_missing_once(_Session("4.3.0"))
    log_missing_once(_Session("4.3.0"))
    hints = [r for r in caplog.records if r.name == "barrier_kafka.spark_settings"]
    assert len(hints) == 1
    assert hints[0].levelno == logging.INFO
    assert f"{UNIX_SOCKETS}=true" in hints[0].getMessage()
    assert f"{STATELESS_AQE}=false" in hints[0].getMessage()
    assert "recommended_spark_conf()" in hints[0].getMessage()


def test_no_hint_for_a_session_that_has_it(monkeypatch, caplog):
    monkeypatch.setattr(spark_settings, "_hinted", False)
    caplog.set_level(logging.INFO, logger="barrier_kafka.spark_settings")
    log_missing_once(_Session("4.3.0", **ALL))
    assert not [r for r in caplog.records if r.name == "barrier_kafka.spark_settings"]


class _Parser:
    def error(self, message):
        raise SystemExit(message)


def test_bench_pipeline_conf_pairs():
    assert session_conf(_Parser(), [f"{UNIX_SOCKETS}=false", " a.b = c=d "]) == {
        UNIX_SOCKETS: "false", "a.b": "c=d"}
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        session_conf(_Parser(), ["spark.x"])
