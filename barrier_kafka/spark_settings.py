"""Spark settings that make the exactly-once pipeline faster, for the session that runs it (driver).

A batch of the pipeline hands data between Spark's JVM and Python workers several times: the
source's read tasks, the keyed operator's tasks, the sink's write tasks, and the driver's
planner and commit workers. By default each of those connections is a TCP socket on the local
host. With ``spark.python.unix.domain.socket.enabled`` (Spark 4.1+, SPARK-51688, off by
default) they are Unix domain sockets, and the fixed cost of the source's read tasks falls to
what Spark's own Kafka source stage costs (figures in docs/operations.md, "Python workers over
Unix domain sockets").
Spark's own Kafka pipeline starts no Python worker and is unaffected.

* :func:`recommended_spark_conf`: the settings to pass when the session is built (they are read
  when the SparkContext starts; setting them later has no effect);
* :func:`missing_recommended`: which of them a running session lacks, as
  :func:`barrier_kafka.register` logs once.

Nothing here changes what the pipeline writes or when it commits: the settings choose how
bytes move between two processes on one machine.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Optional, Tuple

logger = logging.getLogger(__name__)

UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"
#: The first Spark release that has :data:`UNIX_SOCKETS`.
UNIX_SOCKETS_SINCE = (4, 1)


def _release(version: str) -> Tuple[int, int]:
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    while len(parts) < 2:
        parts.append(0)
    return parts[0], parts[1]


def recommended_spark_conf(spark_version: Optional[str] = None) -> Dict[str, str]:
    """The session settings this library recommends for ``spark_version`` (PySpark's own version
    when not given), to pass when building the session::

        SparkSession.builder.config(map=barrier_kafka.recommended_spark_conf())

    Empty for a release without them (Spark 4.0 has no Unix domain sockets for its Python
    workers). Runs on the driver."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    if _release(spark_version) >= UNIX_SOCKETS_SINCE:
        return {UNIX_SOCKETS: "true"}
    return {}


def missing_recommended(spark) -> List[str]:
    """The names of :func:`recommended_spark_conf` that the session ``spark`` does not have at
    their recommended value; empty where the session's settings cannot be read (a Spark Connect
    client: the server's settings apply). Runs on the driver."""
    return list(_missing(spark))


def _missing(spark) -> Dict[str, str]:
    """The recommended settings ``spark`` lacks, each with its recommended value."""
    try:
        conf = spark.sparkContext.getConf()
        version = spark.version
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext on the client
        return {}
    return {key: value for key, value in recommended_spark_conf(version).items()
            if str(conf.get(key, "false")).strip().lower() != value}


_hinted = False


def log_missing_once(spark) -> None:
    """Log, once per process at INFO, which recommended settings the session lacks."""
    global _hinted
    if _hinted:
        return
    missing = _missing(spark)
    if missing:
        _hinted = True
        logger.info("Spark settings that would make barrier-kafka's source tasks cheaper are not "
                    "set: %s. Pass them when the session is built, e.g. SparkSession.builder"
                    ".config(map=barrier_kafka.recommended_spark_conf()) (see "
                    "docs/operations.md, 'Python workers over Unix domain sockets').",
                    ", ".join(f"{key}={value}" for key, value in missing.items()))
