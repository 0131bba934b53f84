"""The ``jetstream`` Spark data source: lake streams read as JetStream consumers would see them.

Importing this package imports pyspark; ``jsspark`` itself does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Spark prints a data source's options in query plans, redacting only the options whose key or
# value matches ``spark.redaction.regex`` (secret|password|token|access.key) or this session conf.
PLAN_REDACTION_CONF = "spark.sql.redaction.options.regex"
STORAGE_OPTIONS_PATTERN = r"^storage\."
# What Spark's patterns miss besides: the live source's ``nkeySeed``, and a value holding a URL's
# userinfo (``servers`` as ``nats://user:pw@host`` or ``nats://token@host``, a ``spillDir``).
NKEY_SEED_PATTERN = r"(?i:^nkeyseed$)"
URL_USERINFO_PATTERN = r"://[^/@\s]+@"
PLAN_REDACTION_PATTERNS = (STORAGE_OPTIONS_PATTERN, NKEY_SEED_PATTERN, URL_USERINFO_PATTERN)


def register(spark: SparkSession) -> None:
    """Register ``format("jetstream")`` on ``spark`` (auto-registration of the
    ``pyspark_jetstream`` module makes that optional), and have the session's plans redact
    every ``storage.*`` option, the nkey seed and URL credentials, not just what Spark redacts
    anyway (an Azure SAS key, a GCS service account key, ``nats://user:pw@host`` would show)."""
    from jsspark.datasource.source import JetStreamDataSource

    spark.dataSource.register(JetStreamDataSource)
    current = spark.conf.get(PLAN_REDACTION_CONF, None) or "(?i)url"
    missing = [p for p in PLAN_REDACTION_PATTERNS if p not in current]
    if missing:
        spark.conf.set(PLAN_REDACTION_CONF, "|".join((current, *missing)))


__all__ = ["register"]
