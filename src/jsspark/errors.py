"""One exception hierarchy for jsspark.

API errors carry exactly what nats-server puts in a JetStream API error
(``{"code": 400, "err_code": 10071, "description": "wrong last sequence: 5"}``), with the
codes and texts of the server's own table (``_data/jetstream_errors.txt``, read from
nats-server's ``server/errors.json``). Build them by name, as the server does:

    raise api_error("JSStreamWrongLastSequenceErrF", seq=5)

The class of an API error follows its HTTP code, like ``nats.js.errors`` in nats-py, with a
few well-known subclasses by ``err_code`` so callers can ``except StreamNotFoundError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, ClassVar


class JSSparkError(Exception):
    """Base of every error jsspark raises on purpose."""


class SubjectError(JSSparkError, ValueError):
    """An invalid subject, filter or asset name; the message is the server's text."""


class HeaderError(JSSparkError, ValueError):
    """A message header no NATS client can send (nats-py's ``BadHeaderError``): the message names it."""


class SubjectTransformError(SubjectError):
    """An invalid subject mapping; the message is the server's text
    (``invalid mapping destination: ... in ...`` or ``invalid subject``)."""


@dataclass(frozen=True)
class ErrorSpec:
    """One row of nats-server's error table."""

    name: str
    code: int
    err_code: int
    template: str

    def render(self, **fields: Any) -> str:
        def sub(m: re.Match[str]) -> str:
            key = m.group(1)
            if key not in fields:
                raise KeyError(f"{self.name} needs a value for {{{key}}}")
            return str(fields[key])

        return re.sub(r"\{(\w+)\}", sub, self.template)


_LINE = re.compile(r"""^(?P<name>\w+)\s+(?P<code>\d+)\s+(?P<err>\d+)\s+(?P<q>['"])(?P<text>.*)(?P=q)\s*$""")


@cache
def error_table() -> dict[str, ErrorSpec]:
    """Every JetStream API error by name, from the bundled copy of the server's table."""
    text = resources.files("jsspark").joinpath("_data/jetstream_errors.txt").read_text(encoding="utf-8")
    table: dict[str, ErrorSpec] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            spec = ErrorSpec(m["name"], int(m["code"]), int(m["err"]), m["text"])
            table[spec.name] = spec
    return table


@cache
def _by_err_code() -> dict[int, ErrorSpec]:
    return {spec.err_code: spec for spec in error_table().values()}


class APIError(JSSparkError):
    """A JetStream API error: ``code`` (HTTP-like), ``err_code`` (JetStream's), ``description``."""

    http_code: ClassVar[int | None] = None

    def __init__(
        self,
        code: int | None = None,
        err_code: int | None = None,
        description: str | None = None,
        *,
        stream: str | None = None,
        seq: int | None = None,
        field: str | None = None,
    ) -> None:
        self.code = code if code is not None else self.http_code
        self.err_code = err_code
        self.description = description
        self.stream = stream
        self.seq = seq
        self.field = field  # the request field at fault, where the server's text does not name it
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f" field={self.field!r}" if self.field else ""
        return f"{type(self).__name__}: code={self.code} err_code={self.err_code} description='{self.description}'{where}"

    def to_dict(self) -> dict[str, Any]:
        """The ``error`` object exactly as the server writes it."""
        return {"code": self.code, "err_code": self.err_code, "description": self.description}

    @classmethod
    def from_dict(cls, err: dict[str, Any], **kw: Any) -> APIError:
        """Rebuild the right subclass from a server's ``error`` object."""
        code, err_code = err.get("code"), err.get("err_code")
        klass = _class_for(code, err_code)
        return klass(code=code, err_code=err_code, description=err.get("description"), **kw)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, APIError):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.code, self.err_code, self.description))


class BadRequestError(APIError):
    http_code = 400


class NotFoundError(APIError):
    http_code = 404


class ConflictError(APIError):
    http_code = 409


class TooManyRequestsError(APIError):
    http_code = 429


class ServerError(APIError):
    http_code = 500


class ServiceUnavailableError(APIError):
    http_code = 503


class StreamNotFoundError(NotFoundError):
    """10059 stream not found."""


class ConsumerNotFoundError(NotFoundError):
    """10014 consumer not found."""


class MessageNotFoundError(NotFoundError):
    """10037 no message found."""


class StreamNameExistsError(BadRequestError):
    """10058 stream name already in use with a different configuration."""


_BY_HTTP: dict[int, type[APIError]] = {
    400: BadRequestError,
    404: NotFoundError,
    409: ConflictError,
    429: TooManyRequestsError,
    500: ServerError,
    503: ServiceUnavailableError,
}
_BY_ERR: dict[int, type[APIError]] = {
    10059: StreamNotFoundError,
    10014: ConsumerNotFoundError,
    10037: MessageNotFoundError,
    10058: StreamNameExistsError,
}


def _class_for(code: int | None, err_code: int | None) -> type[APIError]:
    if err_code in _BY_ERR:
        return _BY_ERR[err_code]
    return _BY_HTTP.get(code or 0, APIError)


def api_error(name: str, **fields: Any) -> APIError:
    """The server's error ``name`` (e.g. ``JSStreamNotFoundErr``) with its template filled in
    from ``fields`` (``api_error("JSStreamWrongLastSequenceErrF", seq=5)``)."""
    try:
        spec = error_table()[name]
    except KeyError:
        raise KeyError(f"no JetStream error named {name!r}") from None
    klass = _class_for(spec.code, spec.err_code)
    return klass(spec.code, spec.err_code, spec.render(**fields))


def check_uint64(request: str, **fields: int | None) -> None:
    """A request field the server decodes as Go's ``uint64`` (a sequence, a count to keep): a
    negative number or one of 2**64 or more fails to decode, with the decoder's text naming the
    request's struct."""
    for field, value in fields.items():
        if value is not None and not 0 <= value < 2**64:
            raise api_error(
                "JSInvalidJSONErr",
                err=f"json: cannot unmarshal number {value} into Go struct field {request}.{field} of type uint64",
            )


def api_error_by_code(err_code: int, **fields: Any) -> APIError:
    """The server's error with JetStream code ``err_code`` (e.g. 10059)."""
    spec = _by_err_code().get(err_code)
    if spec is None:
        raise KeyError(f"no JetStream error with err_code {err_code}")
    return api_error(spec.name, **fields)


class DirectGetError(JSSparkError):
    """A direct-get failure: the server answers these with a status line, not a JSON error
    (``NATS/1.0 404 Message Not Found``, ``408 Bad Request``, ``413 Too Many Results``)."""

    def __init__(self, status: int, description: str) -> None:
        self.status = status
        self.description = description
        super().__init__(f"{status} {description}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DirectGetError):
            return NotImplemented
        return (self.status, self.description) == (other.status, other.description)

    def __hash__(self) -> int:
        return hash((self.status, self.description))


class UnsupportedConfigError(JSSparkError, ValueError):
    """A stream config asks for a server feature a lake stream does not have (message counters,
    schedules, atomic batch publish): refused rather than stored and silently not applied."""


class LocationError(JSSparkError, ValueError):
    """A lake location the storage layer cannot keep as given; the message names it."""


class ConfigIgnoredWarning(UserWarning):
    """A config field a lake stream cannot honour (placement, replicas, storage) was kept but ignored."""
