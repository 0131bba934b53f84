"""User-facing failures: one line, the nats CLI's shape, never a traceback.

``nats`` prints JetStream API errors as ``nats: error: <what failed>: <description> (<err_code>)``
(jsm.go's ``ApiError.Error()`` is ``"%s (%d)"``). We print the same with ``jsspark:`` so
people and scripts that grep for ``(10059)`` keep working. ``doing(...)`` names the action and
the input (stream, consumer, file) in front of the engine's text, because the engine's
descriptions alone ("stream not found") do not say *which* stream.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from jsspark.errors import APIError, JSSparkError


class CLIError(Exception):
    """A failure caused by the user's input or the lake's state: printed, exit code 1."""


def describe(exc: BaseException) -> str:
    """One line for ``exc``: ``description (err_code)`` for API errors, a short list of the
    fields a config document got wrong for pydantic validation errors, else its text."""
    if isinstance(exc, APIError):
        return f"{exc.description} ({exc.err_code})" + (f" in field {exc.field}" if exc.field else "")
    errors = getattr(exc, "errors", None)
    if callable(errors) and type(exc).__name__ == "ValidationError":
        parts = []
        for err in errors():
            loc = ".".join(str(p) for p in err.get("loc", ())) or "config"
            parts.append(f"{loc}: {err.get('msg', 'invalid')}")
        return "invalid configuration: " + "; ".join(parts)
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {exc.filename}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    first, *rest = text.splitlines()
    causes = error_causes(rest)
    return ": ".join([_ANSI.sub("", first).strip(), *causes]) if causes else text


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def error_causes(lines: list[str]) -> list[str]:
    """The cause chain that follows a delta-rs (object store) error's first line, one ``↳``
    line per cause, without its terminal colours: "Kernel error -> Operation not supported"
    alone hides that loading credentials failed."""
    causes = []
    for line in lines:
        plain = _ANSI.sub("", line).strip()
        if not plain.startswith("↳"):
            break
        causes.append(plain[1:].strip())
    return causes


@contextmanager
def doing(action: str) -> Iterator[None]:
    """Turn engine and input errors raised inside into ``CLIError("<action>: <why>")``."""
    try:
        yield
    except CLIError:
        raise
    except (APIError, JSSparkError, ValueError, OSError, KeyError) as exc:
        raise CLIError(f"{action}: {describe(exc)}") from exc
    except Exception as exc:
        if type(exc).__module__.split(".")[0] in ("yaml", "deltalake", "pyarrow"):
            raise CLIError(f"{action}: {describe(exc)}") from exc
        raise
