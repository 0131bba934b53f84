"""Options of the live (``servers=...``) ``jetstream`` source and sink, and secret redaction.

Spark hands options over as a case-insensitive dict of strings. Connection options map 1:1 onto
``nats.connect`` keyword arguments so nothing jsspark does not understand is invented; the
secret ones (password, token, nkey seed, creds path contents) are kept out of every ``repr``,
log line and error message: ``LiveOptions.__repr__`` prints them as ``***`` and
``redact(text, opts)`` scrubs them from any text (an exception from nats-py may echo a URL with
``user:pass@``). Spark's query progress shows only the offsets, which never hold secrets.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from jsspark.datasource.options import (
    DEFAULT_MAX_TRIGGER_DELAY,
    STORAGE_PREFIX,
    OptionError,
    interval_seconds,
    parse_bool,
    parse_interval,
    parse_subject_list,
    storage_options,
)
from jsspark.datasource.redaction import redact_urls, url_secrets

# A micro-batch's stored bytes by default (``maxBytesPerTrigger``; at least one message): a job's
# landing holds its batch in the driver's memory, several times over (200 messages of 4 MiB
# in one batch peaked at 3.7-4.1 GiB there). As a republish batch's bound, and about one spill file's
# worth (``ingestor.CHUNK_BYTES``).
DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_CONSUMER_PREFIX = "jsspark_"  # a server-managed durable without option consumer: jsspark_<stream>
CONNECTION_OPTIONS = (
    "servers", "user", "password", "token", "creds", "nkeySeed", "tlsCa", "tlsCert", "tlsKey",
    "tlsHostname", "tlsHandshakeFirst", "domain", "apiPrefix", "inboxPrefix", "connectTimeout", "name",
)
READ_OPTIONS = (
    "stream", "consumer", "consumerMode", "deliverSubject", "deliverPolicy", "optStartSeq", "optStartTime",
    "filterSubject", "filterSubjects", "headersOnly", "maxAckPending", "maxMessagesPerTrigger", "maxBytesPerTrigger",
    "minMessagesPerTrigger", "maxTriggerDelay", "spillDir", "chunkRows",
    "waitTimeout", "reportLatestOffset", "spillReferences", "failOnDataLoss",
)
# The lake source's option names (JetStream ConsumerConfig JSON) for the same settings.
CONSUMER_CONFIG_NAMES = {
    "deliver_policy": "deliverPolicy", "opt_start_seq": "optStartSeq", "opt_start_time": "optStartTime",
    "filter_subject": "filterSubject", "filter_subjects": "filterSubjects", "headers_only": "headersOnly",
}
WRITE_OPTIONS = ("subject", "msgIdColumn", "maxInFlight", "publishTimeout", "checkpointLocation", "queryName", "stream")
SECRET_OPTIONS = ("password", "token", "nkeySeed")
CONSUMER_MODES = ("server", "user", "ordered")
DELIVER_POLICIES = ("all", "by_start_sequence", "by_start_time", "last", "new", "last_per_subject")


def _canonical(options: Mapping[str, str], allowed: tuple[str, ...]) -> dict[str, str]:
    known = {n.lower(): n for n in allowed}
    known.update((alias, name) for alias, name in CONSUMER_CONFIG_NAMES.items() if name in allowed)
    out: dict[str, str] = {}
    for key, value in options.items():
        name = known.get(key.lower())
        if name is None:
            raise OptionError(f"jetstream (live): unknown option {key!r}; known: {', '.join(allowed)}")
        if name in out:
            raise OptionError(f"jetstream (live): option {name} is given twice (as {key!r} too)")
        out[name] = str(value)
    return out


def _int(opts: Mapping[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    if key not in opts:
        return default
    try:
        value = int(opts[key])
    except ValueError:
        raise OptionError(f"jetstream (live): option {key} must be an integer, got {opts[key]!r}") from None
    if value < minimum:
        raise OptionError(f"jetstream (live): option {key} must be >= {minimum}, got {value}")
    return value


def _seconds(opts: Mapping[str, str], key: str, default: float, where: str = "jetstream (live)") -> float:
    """A timeout option above 0: seconds ("30"), or a Spark interval as ``maxTriggerDelay`` takes
    ("30s", "2 minutes")."""
    if key not in opts:
        return default
    try:
        value = float(opts[key])
    except ValueError:
        value = interval_seconds(opts[key]) or math.nan
    if not math.isfinite(value) or value <= 0:
        raise OptionError(f"{where}: {key} must be seconds or an interval above 0 ('30', '30s', '2 minutes'), "
                          f"got {opts[key]!r}")
    return value


def _check_name(key: str, name: str, default: bool = False) -> None:
    """Stream and consumer names are tokens of the JetStream API's subjects: the server's rules
    and texts (path separators first, as its API handlers look), checked at ``load()``.
    Otherwise the first request fails on something else: nats-py's "invalid subject", or a dot
    splits the token and the server answers 10056/10017 ("... in subject does not match ...").
    ``default``: the durable's name is ``jsspark_<stream>`` (too long for a long stream name)."""
    from jsspark.config.validation import name_error  # not at the top: executors unpickle options
    from jsspark.errors import api_error

    if default:
        if name_error(key, name) is not None:
            raise OptionError(f"jetstream (live): option consumer: the default durable name "
                              f"{DEFAULT_CONSUMER_PREFIX}<stream> would be over 255 bytes for this stream; set option "
                              f"consumer")
        return
    if "/" in name or "\\" in name:
        bad = api_error("JSStreamNameContainsPathSeparatorsErr" if key == "stream"
                        else "JSConsumerNameContainsPathSeparatorsErr").description
    else:
        bad = name_error(key, name)
    if bad is not None:
        raise OptionError(f"jetstream (live): option {key} {name if len(name) <= 40 else name[:40] + '...'!r}: {bad}")


@dataclass(frozen=True)
class Connection:
    """Where and how to connect; picklable so executors (the sink) can connect too."""

    servers: tuple[str, ...]
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    creds: str | None = None
    nkey_seed: str | None = field(default=None, repr=False)
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_hostname: str | None = None
    # TLS before the server's INFO, for a server with ``tls { handshake_first: true }`` (nats.go's TLSHandshakeFirst)
    tls_handshake_first: bool = False
    domain: str | None = None
    api_prefix: str | None = None
    inbox_prefix: str = "_INBOX"
    connect_timeout: int = 5
    name: str = "jsspark"

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value is False:
                continue
            if f.name in ("password", "token", "nkey_seed"):
                value = "***"
            elif f.name == "servers":
                value = tuple(redact_urls(s) for s in value)
            shown.append(f"{f.name}={value!r}")
        return f"Connection({', '.join(shown)})"

    @property
    def js_prefix(self) -> str:
        """The JetStream API prefix requests go to (``$JS.<domain>.API`` for a domain)."""
        if self.api_prefix:
            return self.api_prefix.rstrip(".")
        if self.domain:
            return f"$JS.{self.domain}.API"
        return "$JS.API"

    def secrets(self) -> list[str]:
        """Every secret value, for scrubbing texts (URL passwords included)."""
        return [s for s in (self.password, self.token, self.nkey_seed) if s] + url_secrets(self.servers)

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect``: only what was set, TLS as an SSL context."""
        kw: dict[str, Any] = {
            "servers": list(self.servers),
            "name": self.name,
            "connect_timeout": self.connect_timeout,
            "inbox_prefix": self.inbox_prefix,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.25,
        }
        if self.user is not None:
            kw["user"] = self.user
        if self.password is not None:
            kw["password"] = self.password
        if self.token is not None:
            kw["token"] = self.token
        if self.creds is not None:
            _readable("creds", self.creds)  # nats-py reads it only at CONNECT, failing with a bare errno
            kw["user_credentials"] = self.creds
        if self.nkey_seed is not None:
            kw["nkeys_seed_str"] = self.nkey_seed
        if self.tls_ca or self.tls_cert:
            import ssl

            for option, path in (("tlsCa", self.tls_ca), ("tlsCert", self.tls_cert), ("tlsKey", self.tls_key)):
                if path:
                    _readable(option, path)
            ctx = ssl.create_default_context(cafile=self.tls_ca) if self.tls_ca else ssl.create_default_context()
            if self.tls_cert:
                ctx.load_cert_chain(self.tls_cert, self.tls_key, password=functools.partial(_no_passphrase,
                                                                                        self.tls_key or self.tls_cert))
            kw["tls"] = ctx
        if self.tls_hostname:  # also alone: nats-py checks the server's certificate against it with the system's CAs
            kw["tls_hostname"] = self.tls_hostname
        if self.tls_handshake_first:  # also alone: nats-py's default context, the system's CAs
            kw["tls_handshake_first"] = True
        return kw


def _readable(option: str, path: str) -> None:
    """A file option's file, where the connection is made: a missing or unreadable one fails
    naming the option and the path (Python's own error names neither: ``[Errno 2] No such file``)."""
    try:
        open(path, "rb").close()  # opened only to see that it can be
    except OSError as e:
        raise OptionError(f"jetstream (live): option {option}: cannot read {path!r}: {e.strerror or e}") from None


def _no_passphrase(path: str) -> str:
    """``load_cert_chain``'s password callback, called only for an encrypted key: without one
    OpenSSL prompts on the terminal (a task or a job waits there) or fails as ``[Errno 22]``."""
    raise OptionError(f"jetstream (live): option tlsKey: the private key in {path!r} is encrypted and jsspark "
                      f"takes no passphrase; give it the key without one (openssl pkey -in KEY -out PLAIN_KEY)")


def redact(text: str, conn: Connection | None) -> str:
    """``text`` with every secret of ``conn`` and any ``user:pass@`` in URLs replaced by ``***``."""
    text = redact_urls(text)
    for secret in conn.secrets() if conn is not None else ():
        text = text.replace(secret, "***")
    return text


def parse_connection(opts: Mapping[str, str]) -> Connection:
    servers = tuple(s.strip() for s in opts.get("servers", "").split(",") if s.strip())
    if not servers:
        raise OptionError("jetstream (live): option servers must name at least one nats:// URL")
    if opts.get("tlsKey") and not opts.get("tlsCert"):
        raise OptionError("jetstream (live): option tlsKey needs tlsCert")
    if opts.get("domain") and opts.get("apiPrefix"):
        raise OptionError("jetstream (live): options domain and apiPrefix are exclusive")
    return Connection(
        servers=servers,
        user=opts.get("user"),
        password=opts.get("password"),
        token=opts.get("token"),
        creds=opts.get("creds"),
        nkey_seed=opts.get("nkeySeed"),
        tls_ca=opts.get("tlsCa"),
        tls_cert=opts.get("tlsCert"),
        tls_key=opts.get("tlsKey"),
        tls_hostname=opts.get("tlsHostname"),
        tls_handshake_first=parse_bool("tlsHandshakeFirst", opts.get("tlsHandshakeFirst", "false")),
        domain=opts.get("domain"),
        api_prefix=opts.get("apiPrefix"),
        inbox_prefix=opts.get("inboxPrefix", "_INBOX"),
        connect_timeout=_int(opts, "connectTimeout", 5, 1) or 5,
        name=opts.get("name", "jsspark"),
    )


@dataclass(frozen=True)
class LiveReadOptions:
    """The live source: which origin stream, which consumer and how, and batch sizing."""

    conn: Connection
    stream: str
    consumer: str
    mode: str = "server"
    deliver_subject: str | None = None
    deliver_policy: str = "all"
    opt_start_seq: int | None = None
    opt_start_time: str | None = None
    filter_subject: str | None = None
    filter_subjects: tuple[str, ...] = ()
    headers_only: bool = False
    # the server-managed durable's bound on unacked messages, i.e. on one micro-batch: acks come only
    # after a batch's commit, so at most this many messages land per trigger
    max_ack_pending: int = 200_000
    max_messages: int | None = None
    # Delta's maxBytesPerTrigger: about this many stored bytes per batch, at least one message
    max_bytes: int = DEFAULT_MAX_BYTES
    # Kafka's minOffsetsPerTrigger / maxTriggerDelay: a batch waits until it holds this many
    # messages or this long (seconds) has passed since the last batch (jobs: ``JobSpec`` pacing)
    min_messages: int | None = None
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY
    spill_dir: str | None = None
    chunk_rows: int = 5_000
    wait_timeout: float = 60.0
    report_latest_offset: bool = False
    # rows by reference (``live.spill.REFERENCE_SCHEMA``) for a landing sink: set by the job runner
    spill_references: bool = False
    # the origin deleted and created again: fail (DataLossError), or read the new stream from its start
    fail_on_data_loss: bool = True
    # ``storage.<key>`` options: delta-rs storage options for a ``spillDir`` on an object store
    storage_options: dict[str, str] | None = field(default=None, repr=False)


def parse_live_read_options(options: Mapping[str, str]) -> LiveReadOptions:
    """Validated read options; errors name the option and never echo a secret."""
    from jsspark.live.spill import spill_location

    storage = storage_options(options)
    opts = _canonical({k: v for k, v in options.items() if not k.lower().startswith(STORAGE_PREFIX)},
                      CONNECTION_OPTIONS + READ_OPTIONS)
    conn = parse_connection(opts)
    if opts.get("spillDir"):
        spill_location(opts["spillDir"], storage)  # a scheme or URI that cannot work fails at load()
    stream = opts.get("stream")
    if not stream:
        raise OptionError("jetstream (live): option stream names the origin stream")
    _check_name("stream", stream)
    mode = opts.get("consumerMode", "server").lower()
    consumer = opts.get("consumer") or f"{DEFAULT_CONSUMER_PREFIX}{stream}"
    if opts.get("consumer") or mode == "server":
        _check_name("consumer", consumer, default=not opts.get("consumer"))
    if mode not in CONSUMER_MODES:
        raise OptionError(f"jetstream (live): consumerMode must be one of {CONSUMER_MODES}, got {mode!r}")
    policy = opts.get("deliverPolicy", "all").lower()
    if policy not in DELIVER_POLICIES:
        raise OptionError(f"jetstream (live): deliverPolicy must be one of {DELIVER_POLICIES}, got {policy!r}")
    if mode == "user":
        if not opts.get("consumer") or not opts.get("deliverSubject"):
            raise OptionError("jetstream (live): consumerMode user binds an existing durable: "
                              "options consumer and deliverSubject are both required")
        if any(k in opts for k in ("deliverPolicy", "optStartSeq", "optStartTime", "filterSubject", "filterSubjects",
                                   "headersOnly")):
            raise OptionError("jetstream (live): with consumerMode user the start position, filter and headersOnly "
                              "are the durable's own; do not set deliverPolicy/optStartSeq/optStartTime/filterSubject(s)/"
                              "headersOnly")
    if mode == "ordered":
        given = [k for k in ("consumer", "deliverSubject") if k in opts]
        if given:
            raise OptionError(f"jetstream (live): consumerMode ordered creates its own ephemeral consumer and inbox; "
                              f"do not set {'/'.join(given)} (a durable is read with consumerMode server or user)")
    start_seq = _int(opts, "optStartSeq", None, 1)
    if policy == "by_start_sequence" and start_seq is None:
        raise OptionError("jetstream (live): deliverPolicy by_start_sequence needs optStartSeq")
    if policy == "by_start_time" and not opts.get("optStartTime"):
        raise OptionError("jetstream (live): deliverPolicy by_start_time needs optStartTime")
    given_delay = opts.get("maxTriggerDelay")
    delay = LiveReadOptions.max_trigger_delay if given_delay is None else parse_interval("maxTriggerDelay", given_delay)
    wait = _seconds(opts, "waitTimeout", 60.0)
    return LiveReadOptions(
        conn=conn,
        stream=stream,
        consumer=consumer,
        mode=mode,
        deliver_subject=opts.get("deliverSubject"),
        deliver_policy=policy,
        opt_start_seq=start_seq,
        opt_start_time=opts.get("optStartTime"),
        filter_subject=opts.get("filterSubject"),
        filter_subjects=_subjects(opts),
        headers_only=parse_bool("headersOnly", opts.get("headersOnly", "false")),
        max_ack_pending=_int(opts, "maxAckPending", LiveReadOptions.max_ack_pending, 1) or LiveReadOptions.max_ack_pending,
        max_messages=_int(opts, "maxMessagesPerTrigger", None, 1),
        max_bytes=_int(opts, "maxBytesPerTrigger", DEFAULT_MAX_BYTES, 1) or DEFAULT_MAX_BYTES,
        min_messages=_int(opts, "minMessagesPerTrigger", None, 1),
        max_trigger_delay=delay,
        spill_dir=opts.get("spillDir"),
        chunk_rows=_int(opts, "chunkRows", 5_000, 1) or 5_000,
        wait_timeout=wait,
        report_latest_offset=parse_bool("reportLatestOffset", opts.get("reportLatestOffset", "false")),
        spill_references=parse_bool("spillReferences", opts.get("spillReferences", "false")),
        fail_on_data_loss=parse_bool("failOnDataLoss", opts.get("failOnDataLoss", "true")),
        storage_options=storage,
    )


def _subjects(opts: Mapping[str, str]) -> tuple[str, ...]:
    """``filterSubjects``: several filters (comma-separated), as a mirror or source with
    several transforms asks its origin for; exclusive with ``filterSubject``."""
    subjects = tuple(s for s in parse_subject_list("filterSubjects", opts.get("filterSubjects", "")) if s)
    if subjects and opts.get("filterSubject"):
        raise OptionError("jetstream (live): options filterSubject and filterSubjects are exclusive")
    return subjects


@dataclass(frozen=True)
class LiveWriteOptions:
    """The live sink: rows published to a server with JetStream acks."""

    conn: Connection
    subject: str | None = None
    msg_id_column: str | None = None
    max_in_flight: int = 1_000
    publish_timeout: float = 10.0
    expected_stream: str | None = None


def parse_live_write_options(options: Mapping[str, str]) -> LiveWriteOptions:
    opts = _canonical(options, CONNECTION_OPTIONS + WRITE_OPTIONS)
    conn = parse_connection(opts)
    timeout = _seconds(opts, "publishTimeout", 10.0)
    return LiveWriteOptions(
        conn=conn,
        subject=opts.get("subject"),
        msg_id_column=opts.get("msgIdColumn"),
        max_in_flight=_int(opts, "maxInFlight", 1_000, 1) or 1_000,
        publish_timeout=timeout,
        expected_stream=opts.get("stream"),
    )
