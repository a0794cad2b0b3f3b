"""The protocol vocabulary every other package shares: row kinds and channel names
(:mod:`~barrier_core.schema`), the source's checkpoint settings and the completed-offsets hand-off
(codecs), the error tree, option specs, Kafka client-config translation, the test-only fault
points, and the import of kafka-python's crc32c past Spark's jars
(:mod:`~barrier_core.crc32c_import`, installed below). Imports nothing of the project; runs
anywhere (driver workers and executors).
"""

from barrier_core import crc32c_import as _crc32c_import

_crc32c_import.install()
