"""The rows the ``jetstream`` source produces, as a Spark schema and as the exact Arrow schema.

Spark 4.2+ rejects an Arrow batch whose schema is not *equal* to
``to_arrow_schema(schema, timezone="UTC")``: names, order, types and nullability. The Arrow
form is spelled out here (pyarrow only, so executors and the engine need no pyspark import to
build batches) and a test pins it to what pyspark derives from ``SPARK_SCHEMA_DDL``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

SPARK_SCHEMA_DDL = (
    "stream string, subject string, seq bigint, time timestamp, ts_ns bigint, "
    "headers array<struct<name: string, value: string>>, data binary, consumer string, "
    "delivery_seq bigint, num_pending bigint"
)

HEADER_STRUCT = pa.struct([pa.field("name", pa.string()), pa.field("value", pa.string())])
# Spark names a list's child "element" (pyarrow's default is "item").
HEADERS_ARROW = pa.list_(pa.field("element", HEADER_STRUCT))

ARROW_SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string()),
        pa.field("subject", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("time", pa.timestamp("us", tz="UTC")),
        pa.field("ts_ns", pa.int64()),
        pa.field("headers", HEADERS_ARROW),
        pa.field("data", pa.binary()),
        pa.field("consumer", pa.string()),
        pa.field("delivery_seq", pa.int64()),
        pa.field("num_pending", pa.int64()),
    ]
)


def spark_schema() -> StructType:
    """``SPARK_SCHEMA_DDL`` as a ``StructType`` built without a running session."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("name", StringType()), StructField("value", StringType())])
    return StructType(
        [
            StructField("stream", StringType()),
            StructField("subject", StringType()),
            StructField("seq", LongType()),
            StructField("time", TimestampType()),
            StructField("ts_ns", LongType()),
            StructField("headers", ArrayType(header)),
            StructField("data", BinaryType()),
            StructField("consumer", StringType()),
            StructField("delivery_seq", LongType()),
            StructField("num_pending", LongType()),
        ]
    )
