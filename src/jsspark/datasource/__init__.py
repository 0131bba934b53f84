"""The ``jetstream`` Spark data source: lake streams read as JetStream consumers would see them.

Importing this package imports pyspark; ``jsspark`` itself does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Register ``format("jetstream")`` on ``spark`` (needed only where auto-registration of
    the ``pyspark_jetstream`` module is unavailable, e.g. a class shipped by value)."""
    from jsspark.datasource.source import JetStreamDataSource

    spark.dataSource.register(JetStreamDataSource)


__all__ = ["register"]
