"""A job file: a JetStream stream config plus where its origins, the target and republish live.

The stream part is exactly what ``nats stream info -j | jq .config`` prints (``mirror``,
``sources``, ``republish``, ``subject_transform`` and all), inline or as the path of such a
file. Around it, a job names what a server config does not need to say because a server is
one place: the lake ``target``, each origin's place (``origins``, by origin stream name, ``*``
for the rest), the republish ``destination``, the checkpoint root and the trigger::

    {
      "stream": {"name": "ORDERS_LAKE", "sources": [{"name": "ORDERS"}], "retention": "limits"},
      "target": {"location": "/data/lake"},
      "origins": {"ORDERS": {"servers": "nats://nats:4222", "creds": "/secrets/app.creds"}},
      "trigger": "5 seconds"
    }

Connection fields are JetStream users' names in snake case (``servers``, ``user``, ``password``,
``token``, ``creds``, ``nkey_seed``, ``tls_ca``, ``tls_cert``, ``tls_key``, ``tls_hostname``,
``tls_handshake_first``, ``domain``, ``api_prefix``); ``options`` passes reader options through (``maxMessagesPerTrigger``,
``spillDir``, ...). Secrets never appear in a ``repr`` of a spec.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from jsspark.config import StreamConfig, StreamSource, check_stream_config
from jsspark.config.durations import parse_go_duration
from jsspark.config.loading import load_stream_config
from jsspark.datasource.options import STORAGE_PREFIX, interval_seconds
from jsspark.datasource.redaction import SECRET_STORAGE_KEY, redact_storage_options, redact_urls, url_secrets
from jsspark.errors import APIError
from jsspark.live.options import SECRET_OPTIONS

_SECRET = ("password", "token", "nkey_seed")
# snake-case job fields -> the live source/sink option names (jsspark.live.options)
_CONNECTION = {
    "user": "user", "password": "password", "token": "token", "creds": "creds", "nkey_seed": "nkeySeed",
    "tls_ca": "tlsCa", "tls_cert": "tlsCert", "tls_key": "tlsKey", "tls_hostname": "tlsHostname",
    "tls_handshake_first": "tlsHandshakeFirst", "domain": "domain", "api_prefix": "apiPrefix", "name": "name",
}


class JobError(ValueError):
    """A job file that cannot run; the message names the field and the value."""


def _a_place(value: str | None) -> str | None:
    """A lake or checkpoint place that would land where no one looks (``engine.files.place``:
    ``s3:/bucket``, a DBFS path without its mount) fails when the job is loaded; the place is
    kept as written (Spark resolves a checkpoint's ``dbfs:/`` itself)."""
    if value is not None:
        from jsspark.engine.files import place

        place(value)
    return value


def _secret_option(key: str) -> bool:
    """Whether a reader option holds a secret: a live connection secret (``password``, ``token``,
    ``nkeySeed``) or a ``storage.*`` key the lake source redacts; Spark options ignore case."""
    if key.lower().startswith(STORAGE_PREFIX):
        return bool(SECRET_STORAGE_KEY.search(key[len(STORAGE_PREFIX):]))
    return key.lower() in {o.lower() for o in SECRET_OPTIONS}


def _scalars_as_text(value: Any) -> Any:
    """YAML and JSON give numbers and booleans (``maxMessagesPerTrigger: 100000``,
    ``allow_http: true``); options are text, converted as Spark's ``.option()`` does (booleans
    lower-case). Anything else (a list, a null) is left for validation to refuse, naming it."""
    if not isinstance(value, dict):
        return value
    return {k: str(v).lower() if isinstance(v, bool) else str(v) if isinstance(v, int | float) else v
            for k, v in value.items()}


class Endpoint(BaseModel):
    """Where a stream lives: a lake (``location``) or a NATS server (``servers``)."""

    model_config = ConfigDict(extra="forbid")

    location: str | None = None
    storage_options: dict[str, str] | None = None
    servers: str | list[str] | None = None
    user: str | None = None
    password: str | None = Field(default=None, repr=False)
    token: str | None = Field(default=None, repr=False)
    creds: str | None = None
    nkey_seed: str | None = Field(default=None, repr=False)
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_hostname: str | None = None
    tls_handshake_first: bool | None = None
    domain: str | None = None
    api_prefix: str | None = None
    name: str | None = None
    options: dict[str, str] = Field(default_factory=dict)
    context: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_context(cls, data: Any) -> Any:
        """``{"context": NAME}`` stands for the server and credentials saved in that context
        (``jsspark context add NAME --server URL ...``), as ``nats --context`` does; fields
        given next to it win."""
        if not isinstance(data, dict) or not data.get("context"):
            return data
        from jsspark.cli.context import load  # saved by the CLI, read where a job names one

        name = str(data["context"])
        try:
            ctx = load(name)
        except Exception as e:
            raise ValueError(str(e)) from None
        if not ctx.url:
            raise ValueError(f"context {name!r} has no server (save one with `jsspark context add {name} --server URL`)")
        seed = ctx.nkey_seed
        if not seed and ctx.nkey:
            try:
                seed = Path(ctx.nkey).expanduser().read_text(encoding="utf-8").strip()
            except OSError as e:
                raise ValueError(f"context {name!r}: cannot read its nkey seed file {ctx.nkey}: {e.strerror}") from None
        saved = {"servers": ctx.url, "user": ctx.user, "password": ctx.password, "token": ctx.token,
                 "creds": ctx.creds, "nkey_seed": seed, "tls_ca": ctx.ca, "tls_cert": ctx.cert, "tls_key": ctx.key,
                 "tls_handshake_first": ctx.tls_first}
        return {**{k: v for k, v in saved.items() if v}, **data}

    @field_validator("options", "storage_options", mode="before")
    @classmethod
    def _options_as_text(cls, value: Any) -> Any:
        return _scalars_as_text(value)

    @field_validator("location")
    @classmethod
    def _location(cls, value: str | None) -> str | None:
        return _a_place(value)

    @model_validator(mode="after")
    def _one_place(self) -> Endpoint:
        if (self.location is None) == (self.servers is None):
            raise ValueError("give exactly one of 'location' (a lake) or 'servers' (a NATS server URL)")
        if self.location is not None:
            server_only = [k for k in ("user", "password", "token", "creds", "nkey_seed", "tls_ca", "tls_cert",
                                       "tls_key", "tls_hostname", "tls_handshake_first", "domain", "api_prefix", "name")
                           if getattr(self, k) is not None]  # fmt: skip
            if server_only:
                raise ValueError(f"{', '.join(server_only)}: connection fields need 'servers', not 'location'")
        elif self.storage_options:
            raise ValueError("storage_options: a lake's object-store settings need 'location', not 'servers'")
        return self

    def __repr_args__(self) -> Any:
        """What a ``repr`` shows: secrets left out (passwords, tokens, seeds), secret storage
        options, secret reader options and URL credentials as ``***``."""
        for key, value in super().__repr_args__():
            if key == "storage_options" and value:
                value = redact_storage_options(value)
            elif key == "options" and value:
                value = {k: "***" if v and _secret_option(k) else redact_urls(v) for k, v in value.items()}
            elif key == "servers" and value:
                value = [redact_urls(u) for u in value] if isinstance(value, list) else redact_urls(value)
            yield key, value

    @property
    def is_lake(self) -> bool:
        return self.location is not None

    def option_secrets(self) -> list[str]:
        """The secret values among the reader ``options`` (``_secret_option``) and the URL
        credentials in any of them, for scrubbing texts."""
        return [v for k, v in self.options.items() if v and _secret_option(k)] + url_secrets(list(self.options.values()))

    @property
    def server_urls(self) -> str:
        s = self.servers
        return ",".join(s) if isinstance(s, list) else str(s)

    def connection_options(self) -> dict[str, str]:
        """The live source/sink options that connect to this server."""
        out = {"servers": self.server_urls}
        for field, option in _CONNECTION.items():
            value = getattr(self, field)
            if value is not None:
                out[option] = str(value)
        return out


class RepublishTo(Endpoint):
    """Where a lake stream's ``republish`` sends messages: a server, or a lake (into ``stream``,
    or the one lake stream whose subjects match, as a server routes)."""

    stream: str | None = None
    mode: Literal["at_most_once", "idempotent"] = "at_most_once"


class JobSpec(BaseModel):
    """One stream's replication: what the server would do for it, run as Spark queries."""

    model_config = ConfigDict(extra="forbid")

    stream: StreamConfig
    target: Endpoint
    origins: dict[str, Endpoint] = Field(default_factory=dict)
    republish_to: RepublishTo | None = None
    checkpoint: str | None = None
    trigger: str = "1 second"
    name: str | None = None

    @field_validator("stream", mode="before")
    @classmethod
    def _stream(cls, value: Any) -> Any:
        if isinstance(value, StreamConfig):
            return value
        if isinstance(value, str):
            names_a_file = "\n" not in value and not value.lstrip().startswith("{")
            if names_a_file and not Path(value).is_file():
                raise ValueError(f"no such stream config file: {value}")
            return load_stream_config(value)
        if isinstance(value, dict):
            return StreamConfig.from_json(value)
        raise ValueError("'stream' is a JetStream stream config (a JSON object or the path of one)")

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint(cls, value: str | None) -> str | None:
        return _a_place(value)

    @field_validator("trigger")
    @classmethod
    def _trigger(cls, value: str) -> str:
        text = value.strip().lower().replace("-", "_")
        if text in ("available_now", "availablenow", "once"):
            # "once" is Spark's deprecated Trigger.Once: read as AvailableNow (everything there at
            # start, in bounded batches), since a live origin's one batch would hold only what
            # happened to be buffered yet
            return "available_now"
        seconds = interval_seconds(text)
        if seconds is None:  # a Go duration, as the CLI's --timeout takes: 1m30s
            with contextlib.suppress(ValueError):
                seconds = parse_go_duration(text.replace(" ", "")) / 1e9
        if seconds is None or seconds < 0:
            raise ValueError(f"trigger {value!r}: use 'available_now', 'once' or an interval like '5 seconds'")
        # in the one form Spark's processingTime reads: it refuses '5s', '2m' or '1 min'
        return f"{round(seconds * 1000)} milliseconds" if seconds % 1 else f"{int(seconds)} seconds"

    @model_validator(mode="after")
    def _places(self) -> JobSpec:
        if not self.target.is_lake:
            raise ValueError("'target' must be a lake location: jsspark runs a stream's replication into a lake "
                             "(a server runs its own mirrors and sources)")
        if self.target.options:
            raise ValueError("target.options: the target takes no reader options (they belong to an origin "
                             "in 'origins' or to 'republish_to')")
        cfg = self.stream
        if cfg.mirror is None and not cfg.sources and cfg.republish is None:
            raise ValueError(f"stream {cfg.name!r} has no mirror, sources or republish: nothing to run")
        names = self.origin_names()
        for name in self.origins:
            if name != "*" and name not in names:  # a misspelling would leave the origin read from '*'
                has = ", ".join(repr(n) for n in names) if names else "none"
                raise ValueError(f"origins: {name!r} is no mirror or source of stream {cfg.name!r} "
                                 f"(its origins: {has})")
        for name in names:
            if name not in self.origins and "*" not in self.origins:
                raise ValueError(f"origin stream {name!r}: say where it lives in 'origins' "
                                 f"(a lake 'location' or a server 'servers'), or give a '*' default")
        if cfg.republish is not None and self.republish_to is None:
            raise ValueError(f"stream {cfg.name!r} has republish {cfg.republish.to_json()}: "
                             "'republish_to' must say where (a server 'servers' or a lake 'location')")
        if self.republish_to is not None and cfg.republish is None:
            raise ValueError("'republish_to' is set but the stream config has no 'republish'")
        try:  # the server's rules for the config alone, before Spark starts or anything is created
            check_stream_config(cfg)
        except APIError as e:
            raise ValueError(f"stream {cfg.name!r}: {e.description} ({e.err_code})") from None
        return self

    # -- derived ---------------------------------------------------------------------------------
    @property
    def job_name(self) -> str:
        return self.name or self.stream.name

    @property
    def checkpoint_root(self) -> str:
        base = self.checkpoint or f"{str(self.target.location).rstrip('/')}/_checkpoints"
        return f"{base.rstrip('/')}/{self.job_name}"

    def origin_sources(self) -> list[StreamSource]:
        """The mirror, or the sources: one query each."""
        cfg = self.stream
        return [cfg.mirror] if cfg.mirror is not None else list(cfg.sources or ())

    def origin_names(self) -> list[str]:
        return [s.name for s in self.origin_sources()]

    def origin(self, name: str) -> Endpoint:
        return self.origins.get(name) or self.origins["*"]

    def interval(self) -> float | None:
        """Seconds of an interval trigger; ``None`` for ``available_now``."""
        return None if self.trigger == "available_now" else interval_seconds(self.trigger)

    def trigger_kwargs(self) -> dict[str, Any]:
        """``DataStreamWriter.trigger`` keywords."""
        if self.trigger == "available_now":
            return {"availableNow": True}
        return {"processingTime": self.trigger}


def load_job(source: str | Path | dict[str, Any]) -> JobSpec:
    """A job from a JSON/YAML file (a relative ``stream`` path is relative to the file) or a dict.
    Errors name the file and the field."""
    where = "job"
    if isinstance(source, dict):
        raw = source
    else:
        path = Path(source)
        where = str(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise JobError(f"{path}: cannot read the job file: {e.strerror}") from None
        try:
            raw = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
        except ValueError as e:  # json's text says where, never what
            raise JobError(f"{path}: not valid JSON: {e}") from None
        except yaml.YAMLError as e:
            raise JobError(f"{path}: not valid YAML: {_yaml_problem(e)}") from None
        if not isinstance(raw, dict):
            raise JobError(f"{path}: a job is an object with 'stream' and 'target'")
        if isinstance(raw.get("stream"), str) and not Path(raw["stream"]).is_absolute():
            raw = {**raw, "stream": str(path.parent / raw["stream"])}
    try:
        return JobSpec.model_validate(raw)
    except ValueError as e:
        raise JobError(f"{where}: {_pydantic_text(e)}") from None


# what PyYAML quotes from the file in a problem (an alias or tag name); not a token name
# (``'<scalar>'``) or one character
_QUOTED = re.compile(r"'(?!<)[^']{2,}'|\"(?!<)[^\"]{2,}\"")


def _yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error without the file's text: PyYAML's own quotes the offending line (and an
    alias or tag name), which may be a password or an nkey seed. The problem and where it is."""
    if not isinstance(e, yaml.MarkedYAMLError):
        return str(e)
    parts = [f"{_QUOTED.sub('...', what)}" + (f" (line {mark.line + 1}, column {mark.column + 1})" if mark else "")
             for what, mark in ((e.context, e.context_mark), (e.problem, e.problem_mark)) if what]
    return ", ".join(parts)


def _pydantic_text(e: ValueError) -> str:
    errors = getattr(e, "errors", None)
    if not callable(errors):
        return str(e)
    parts = []
    for err in errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)
