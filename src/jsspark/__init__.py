"""jsspark: NATS JetStream semantics on the lakehouse, native to PySpark."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jsspark.engine.lake import Lake


def connect(location: str, storage_options: dict[str, str] | None = None) -> Lake:
    """A JetStream-like context over the lake streams under ``location`` (see ``engine.lake``)."""
    from jsspark.engine.lake import connect as _connect

    return _connect(location, storage_options)


def register(spark: SparkSession) -> None:
    """Register the ``jetstream`` Spark data source on ``spark`` (pyspark imported only now)."""
    from jsspark.datasource import register as _register

    _register(spark)
