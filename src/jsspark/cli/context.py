"""Saved contexts: named lake locations (and server connection details) to pick by name.

Laid out like the nats CLI's contexts so the habit carries over:

    $XDG_CONFIG_HOME/jsspark/context/<NAME>.json   one context
    $XDG_CONFIG_HOME/jsspark/context.txt           the selected context's name

(``~/.config`` when ``XDG_CONFIG_HOME`` is unset). Server fields (URL, credentials) are what a
job's origin or ``republish_to`` names with ``{"context": NAME}`` (``jobs.spec.Endpoint``);
engine verbs use only the location and storage options. Secrets are stored as given (the file is written 0600) and never
printed: ``redacted()`` is what ``context info`` and ``context ls`` show.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jsspark.cli.errors import CLIError

ENV_LOCATION = "JSSPARK_LOCATION"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_SECRET_FIELDS = ("password", "token", "nkey_seed")
REDACTED = "*********"


@dataclass
class Context:
    """One saved context; field names follow the nats CLI's context JSON where they overlap."""

    name: str
    location: str = ""
    description: str = ""
    url: str = ""
    user: str = ""
    password: str = ""
    token: str = ""
    creds: str = ""
    nkey: str = ""
    nkey_seed: str = ""
    ca: str = ""
    cert: str = ""
    key: str = ""
    tls_first: bool = False
    storage_options: dict[str, str] = field(default_factory=dict)

    def redacted(self) -> dict[str, Any]:
        """The context as JSON with every secret replaced: passwords, tokens, seeds, the
        password or token in the server URL, and storage options whose key names a secret
        (``aws_secret_access_key``...)."""
        from jsspark.datasource.redaction import redact_storage_options, redact_urls

        data = asdict(self)
        for key in _SECRET_FIELDS:
            if data[key]:
                data[key] = REDACTED
        data["url"] = redact_urls(self.url)
        data["storage_options"] = redact_storage_options(self.storage_options, REDACTED)
        return data


def config_dir() -> Path:
    """Where contexts live, read from the environment on every call so tests can point it away."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "jsspark"


def _path(name: str) -> Path:
    return config_dir() / "context" / f"{check_name(name)}.json"


def check_name(name: str) -> str:
    """Context names become file names: letters, digits, ``_ . -``, no path tricks."""
    if not _NAME.match(name) or ".." in name:
        raise CLIError(f"invalid context name {name!r}: use letters, digits, '_', '.' and '-'")
    return name


def load(name: str) -> Context:
    path = _path(name)
    if not path.is_file():
        raise CLIError(f"unknown context {name!r} (see `jsspark context ls`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CLIError(f"could not read context {name!r} from {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise CLIError(f"could not read context {name!r} from {path}: not a JSON object")
    fields = {k: v for k, v in data.items() if k in Context.__dataclass_fields__ and k != "name"}
    for key, value in fields.items():
        if key == "storage_options":
            ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        else:
            ok = isinstance(value, bool if key == "tls_first" else str)
        if not ok:
            want = {"storage_options": "an object of strings", "tls_first": "true or false"}.get(key, "a string")
            raise CLIError(f"could not read context {name!r} from {path}: {key} must be {want}")
    return Context(**fields, name=name)


def save(ctx: Context) -> Path:
    """Write the context file readable by its owner only: it may hold credentials."""
    path = _path(ctx.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {k: v for k, v in asdict(ctx).items() if k != "name"}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
    return path


def names() -> list[str]:
    folder = config_dir() / "context"
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.json"))


def selected() -> str | None:
    """The selected context's name, or None (also when it was removed since)."""
    marker = config_dir() / "context.txt"
    try:
        name = marker.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return name if name and _path(name).is_file() else None


def select(name: str) -> None:
    load(name)  # fail on an unknown name before changing anything
    marker = config_dir() / "context.txt"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(name + "\n", encoding="utf-8")


def remove(name: str) -> None:
    path = _path(name)
    if not path.is_file():
        raise CLIError(f"unknown context {name!r} (see `jsspark context ls`)")
    path.unlink()
    if (config_dir() / "context.txt").is_file() and selected() is None:
        (config_dir() / "context.txt").unlink()


@dataclass(frozen=True)
class Resolved:
    """Where a command's lake is, and why (for ``context info`` and error messages)."""

    location: str
    storage_options: dict[str, str] | None
    source: str


def resolve(location: str | None, context_name: str | None) -> Resolved:
    """The lake to use, most specific first: ``--location``, then ``--context NAME``, then
    ``$JSSPARK_LOCATION``, then the selected context. An explicit flag beats the environment,
    and the environment beats the saved default, as with the nats CLI's ``--context``/``NATS_URL``.
    """
    if location:
        return Resolved(location, None, "--location")
    if context_name:
        ctx = load(context_name)
        return Resolved(_need_location(ctx), ctx.storage_options or None, f"context {ctx.name}")
    env = os.environ.get(ENV_LOCATION)
    if env:
        return Resolved(env, None, ENV_LOCATION)
    chosen = selected()
    if chosen:
        ctx = load(chosen)
        return Resolved(_need_location(ctx), ctx.storage_options or None, f"context {ctx.name}")
    raise CLIError(
        "no lake location: pass --location PATH, set JSSPARK_LOCATION, or save one with "
        "`jsspark context add NAME --location PATH --select`"
    )


def _need_location(ctx: Context) -> str:
    if not ctx.location:
        raise CLIError(
            f"context {ctx.name!r} has no location (set one with `jsspark context add {ctx.name} --location PATH`)"
        )
    return ctx.location
