"""The protocol vocabulary every other package shares: row kinds and channel names
(:mod:`~barrier_core.schema`), the source's checkpoint settings and the completed-offsets hand-off
(codecs), the error tree, option specs, Kafka client-config translation, the test-only fault
points, the import of kafka-python's crc32c past Spark's jars
(:mod:`~barrier_core.crc32c_import`, installed below) and Spark's jars read once per Python
worker, not once per task (:mod:`~barrier_core.jar_archives`, also below and at the start of
every task of the source, the operator and the sinks). Imports nothing of the project; runs
anywhere (driver workers and executors).
"""

from barrier_core import crc32c_import as _crc32c_import
from barrier_core.jar_archives import keep_jar_directories as _keep_jar_directories

_crc32c_import.install()
_keep_jar_directories()
