"""Config documents given with ``--config FILE``: JSON or YAML, a file or ``-`` for stdin.

Read here rather than through ``load_stream_config(path_or_text)`` because that loader treats
a string naming a missing file as the document itself, which would turn a typo in a file name
into a baffling "must be a mapping" error. Also accepts a whole ``nats stream info -j`` (or
``consumer info -j``) answer by taking its ``config``, so piping one CLI into the other works.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from jsspark.cli.errors import CLIError


def read_config(path: str) -> dict[str, Any]:
    """The config mapping in ``path`` (``-`` reads stdin)."""
    if path == "-":
        text, where = sys.stdin.read(), "stdin"
    else:
        text, where = Path(path).read_text(encoding="utf-8"), path
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CLIError(f"could not parse {where} as JSON or YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise CLIError(f"{where} must hold a config mapping, got {type(data).__name__}")
    if isinstance(data.get("config"), dict) and ("state" in data or "created" in data):
        data = data["config"]
    return data
