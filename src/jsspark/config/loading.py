"""Read stream and consumer configs from files or text, JSON or YAML."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from jsspark.config.consumer import ConsumerConfig
from jsspark.config.stream import StreamConfig


def _load(source: str | Path) -> dict[str, Any]:
    """A path (``Path`` or an existing file name) is read; any other string is the document.
    JSON is tried first, so JSON text keeps its exact numbers; then YAML."""
    if isinstance(source, Path) or ("\n" not in source and Path(source).is_file()):
        source = Path(source).read_text(encoding="utf-8")
    try:
        data = json.loads(source)
    except json.JSONDecodeError:
        data = yaml.safe_load(source)
    if not isinstance(data, dict):
        raise ValueError(f"a config document must be a mapping, got {type(data).__name__}")
    return data


def load_stream_config(source: str | Path) -> StreamConfig:
    """A ``StreamConfig`` from JSON or YAML (e.g. ``nats stream info -j | jq .config``);
    durations may be nanoseconds or Go strings such as ``"2m"``."""
    return StreamConfig.from_json(_load(source))


def load_consumer_config(source: str | Path) -> ConsumerConfig:
    """A ``ConsumerConfig`` from JSON or YAML."""
    return ConsumerConfig.from_json(_load(source))
