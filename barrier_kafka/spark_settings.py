"""Spark settings that make the exactly-once pipeline faster, for the session that runs it (driver).

* ``spark.python.unix.domain.socket.enabled`` (Spark 4.1+, SPARK-51688, off by default). A batch
  of the pipeline hands data between Spark's JVM and Python workers several times: the source's
  read tasks, the keyed operator's tasks, the sink's write tasks, and the driver's planner and
  commit workers. By default each of those connections is a TCP socket on the local host; with
  this setting they are Unix domain sockets, and the fixed cost of the source's read tasks falls
  to what Spark's own Kafka source stage costs (docs/operations.md, "Python workers over Unix
  domain sockets"). Spark reads it when the SparkContext starts.
* ``spark.sql.adaptive.streaming.stateless.enabled`` = false (Spark 4.1+, SPARK-53941, on by
  default). Spark 4.1 runs a stateless stream's shuffles adaptively: the map stage as a Spark
  job of its own, then the rest of the batch re-planned and run as a second job. The keyed
  operator with ``runtime_store="backend"`` is such a stream (stateless ``applyInPandas`` after
  a shuffle whose partitions it fixes itself, so adaptive execution has nothing to change), and
  the second job and the re-planning cost it about 60 ms a batch on 2 cores
  (docs/operations.md, "Adaptive execution of stateless streams"). It leaves batch queries
  adaptive (``spark.sql.adaptive.enabled``) and stateful streams, which Spark never runs
  adaptively. A SQL setting: a query reads it when it starts, so it can also be set on a
  running session (``spark.conf.set``) before ``start()``.

Spark's own Kafka pipeline (source, ``groupBy().count()``, sink) starts no Python worker and is
stateful, so neither setting changes it.

* :func:`recommended_spark_conf`: the settings to pass when the session is built;
* :func:`missing_recommended`: which of them a running session lacks, as
  :func:`barrier_kafka.register` logs once.

Nothing here changes what the pipeline writes or when it commits: the settings choose how
bytes move between two processes on one machine and how Spark schedules a batch's stages.
"""

from __future__ import annotations

import logging
from typing import Dict, List, NamedTuple, Optional, Tuple

logger = logging.getLogger(__name__)

UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"
#: The first Spark release that has :data:`UNIX_SOCKETS`.
UNIX_SOCKETS_SINCE = (4, 1)
STATELESS_AQE = "spark.sql.adaptive.streaming.stateless.enabled"
#: The first Spark release that runs stateless streams adaptively, and has :data:`STATELESS_AQE`.
STATELESS_AQE_SINCE = (4, 1)
#: Adaptive execution of everything: false turns :data:`STATELESS_AQE` off too.
AQE = "spark.sql.adaptive.enabled"


class _Setting(NamedTuple):
    key: str
    value: str        # the recommended value
    default: str      # Spark's, where the session does not set it
    since: Tuple[int, int]
    sql: bool         # a SQL setting (the session's, changeable at runtime), else the context's
    #: another SQL setting and a value of it that has the same effect as this one's
    implied_by: Optional[Tuple[str, str, str]] = None   # (key, value, Spark's default)


_SETTINGS = (_Setting(UNIX_SOCKETS, "true", "false", UNIX_SOCKETS_SINCE, sql=False),
             _Setting(STATELESS_AQE, "false", "true", STATELESS_AQE_SINCE, sql=True,
                      implied_by=(AQE, "false", "true")))


def _has(conf, key: str, value: str, default: str) -> bool:
    return str(conf.get(key, default)).strip().lower() == value


def _release(version: str) -> Tuple[int, int]:
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    while len(parts) < 2:
        parts.append(0)
    return parts[0], parts[1]


def _settings(spark_version: str) -> List[_Setting]:
    """The settings that exist in ``spark_version``."""
    release = _release(spark_version)
    return [s for s in _SETTINGS if release >= s.since]


def recommended_spark_conf(spark_version: Optional[str] = None) -> Dict[str, str]:
    """The session settings this library recommends for ``spark_version`` (PySpark's own version
    when not given), to pass when building the session::

        SparkSession.builder.config(map=barrier_kafka.recommended_spark_conf())

    Empty for a release without them (Spark 4.0 has no Unix domain sockets for its Python
    workers and never runs a stream adaptively). Runs on the driver."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    return {s.key: s.value for s in _settings(spark_version)}


def missing_recommended(spark) -> List[str]:
    """The names of :func:`recommended_spark_conf` that the session ``spark`` does not have at
    their recommended value. Runs on the driver (or a Spark Connect client: the server's
    settings, read through ``spark.conf``)."""
    return list(_missing(spark))


def _missing(spark) -> Dict[str, str]:
    """The recommended settings ``spark`` lacks, each with its recommended value: a SQL setting
    as the session has it now (what the next query started will run with), the others as the
    SparkContext was started with. A Spark Connect client has no SparkContext: there every
    setting is read from the server's session (``spark.conf``, which holds the settings the
    server started with); one the server will not show (Databricks serverless limits which
    settings a client may read) is not reported."""
    try:
        version = spark.version
    except Exception:  # noqa: BLE001 - nothing to compare against
        return {}
    try:
        context_conf = spark.sparkContext.getConf()
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext on the client
        context_conf = spark.conf
    missing = {}
    for setting in _settings(version):
        conf = spark.conf if setting.sql else context_conf
        try:
            if _has(conf, setting.key, setting.value, setting.default):
                continue
            if setting.implied_by is not None and _has(spark.conf, *setting.implied_by):
                continue
        except Exception:  # noqa: BLE001 - a setting the server does not let a client read
            continue
        missing[setting.key] = setting.value
    return missing


_hinted = False


def log_missing_once(spark) -> None:
    """Log, once per process at INFO, which recommended settings the session lacks."""
    global _hinted
    if _hinted:
        return
    missing = _missing(spark)
    if missing:
        _hinted = True
        logger.info("Spark settings that would make barrier-kafka's batches cheaper are not "
                    "set: %s. Pass them when the session is built, e.g. SparkSession.builder"
                    ".config(map=barrier_kafka.recommended_spark_conf()) (see "
                    "docs/operations.md, 'Python workers over Unix domain sockets' and "
                    "'Adaptive execution of stateless streams').",
                    ", ".join(f"{key}={value}" for key, value in missing.items()))
