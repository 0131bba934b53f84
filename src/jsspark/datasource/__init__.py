"""The ``jetstream`` Spark data source: lake streams read as JetStream consumers would see them.

Importing this package imports pyspark; ``jsspark`` itself does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Spark prints a data source's options in query plans, redacting only the keys that match
# ``spark.redaction.regex`` (secret|password|token|access.key) or this session conf.
PLAN_REDACTION_CONF = "spark.sql.redaction.options.regex"
STORAGE_OPTIONS_PATTERN = r"^storage\."


def register(spark: SparkSession) -> None:
    """Register ``format("jetstream")`` on ``spark`` (auto-registration of the
    ``pyspark_jetstream`` module makes that optional), and have the session's plans redact
    every ``storage.*`` option, not just the keys Spark redacts anyway (an Azure SAS key, a
    GCS service account key would show)."""
    from jsspark.datasource.source import JetStreamDataSource

    spark.dataSource.register(JetStreamDataSource)
    current = spark.conf.get(PLAN_REDACTION_CONF, None) or "(?i)url"
    if STORAGE_OPTIONS_PATTERN not in current:
        spark.conf.set(PLAN_REDACTION_CONF, f"{current}|{STORAGE_OPTIONS_PATTERN}")


__all__ = ["register"]
