"""The protocol vocabulary every other package shares: row kinds and channel names
(:mod:`~barrier_core.schema`), the source's checkpoint settings and the completed-offsets hand-off
(codecs), the error tree, option specs, Kafka client-config translation and the test-only fault
points. Imports nothing of the project; runs anywhere (driver workers and executors).
"""
