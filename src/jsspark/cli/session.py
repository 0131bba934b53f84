"""What one command invocation works with: the parsed flags and, on first use, the lake.

The lake is opened lazily so verbs that never touch it (``context ...``, ``--help``, argument
errors) do not pay for importing the engine (pyarrow, deltalake).
"""

from __future__ import annotations

import argparse
from functools import cached_property
from typing import TYPE_CHECKING

from jsspark.cli import context

if TYPE_CHECKING:
    from jsspark.engine.lake import Lake


class Session:
    """Flags shared by every verb (``--location``, ``--context``, ``-j``) plus the lake."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.json: bool = bool(getattr(args, "json", False))

    @cached_property
    def resolved(self) -> context.Resolved:
        return context.resolve(getattr(self.args, "location", None), getattr(self.args, "context", None))

    @cached_property
    def lake(self) -> Lake:
        """The engine's ``Lake`` at the resolved location (never imports pyspark)."""
        from jsspark.engine.lake import connect

        where = self.resolved
        return connect(where.location, where.storage_options)
