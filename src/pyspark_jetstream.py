"""Spark's auto-registration hook: a top-level ``pyspark_*`` module exposing ``DefaultSource``.

On the first Python data source lookup Spark imports every top-level ``pyspark_*`` module and
registers its ``DefaultSource``, so ``spark.read.format("jetstream")`` works with no
``register`` call once jsspark is installed.
"""

from __future__ import annotations

from jsspark.datasource.source import JetStreamDataSource as DefaultSource

__all__ = ["DefaultSource"]
