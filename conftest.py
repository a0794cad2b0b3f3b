"""Root conftest: makes the real-service fixtures (Kafka, S3, Spark) available everywhere."""

pytest_plugins = ["kafka_harness.pytest_plugin"]
