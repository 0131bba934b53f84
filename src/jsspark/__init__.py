"""jsspark: NATS JetStream semantics on the lakehouse, native to PySpark."""

from __future__ import annotations

__version__ = "0.1.0"
