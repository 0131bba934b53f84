"""Options of the ``jetstream`` source and sink: parsed, typed and validated at ``load()``.

Consumer options use JetStream's ``ConsumerConfig`` JSON names, so a consumer written for a
server reads the same on a lake; an invalid combination fails with the server's own error
(``check_consumer_config``). Spark-side options follow Spark's Kafka and Delta sources
(``maxMessagesPerTrigger`` ~ ``maxOffsetsPerTrigger``, ``failOnDataLoss``, ``minPartitions``).
Spark hands options over lower-cased, as strings.

Object-store credentials and settings pass through to delta-rs as options prefixed
``storage.`` (like Spark's Kafka source takes ``kafka.*``): ``storage.aws_region`` becomes the
``storage_options`` entry ``aws_region``, used by ``jsspark.connect`` on the driver and by every
task on the executors. Their values never appear in a ``repr``, an offset, query progress or an
error (``redaction``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jsspark.datasource.redaction import redact_storage, scrubbed

if TYPE_CHECKING:
    from jsspark.config import ConsumerConfig, StreamConfig

# Neither the config models nor the engine are imported at the top: executors unpickle
# ``WriteOptions`` and ``LiveReadOptions`` from here, and a fresh Python worker would pay a
# third of a second importing pydantic models it never uses (the parsers import them).

# Consumer options: JetStream ConsumerConfig JSON names.
CONSUMER_OPTIONS = (
    "durable_name",
    "ack_policy",
    "max_ack_pending",
    "deliver_policy",
    "opt_start_seq",
    "opt_start_time",
    "filter_subject",
    "filter_subjects",
    "headers_only",
    "replay_policy",
    "rate_limit_bps",
    "inactive_threshold",
)
# Spark options, as users of the Kafka and Delta sources spell them.
SPARK_READ_OPTIONS = (
    "maxMessagesPerTrigger",
    "maxBytesPerTrigger",
    "minMessagesPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "reportLatestOffset",
    "minPartitions",
)
COMMON_OPTIONS = ("path", "stream")
# Spark passes the query name to streaming sinks as an option (``queryName``); it is only accepted.
SINK_OPTIONS = ("checkpointLocation", "queryName", "txnAppId", "dedupByOrigin", "ackSource", "form", "origin", "originIdentity")

# Options passed through to delta-rs's ``storage_options`` (object store credentials and settings).
STORAGE_PREFIX = "storage."

# A Spark source is neither a pull nor a push consumer; with a rate limit it is checked as a
# push consumer (the server refuses ``rate_limit_bps`` on pull consumers) delivering here.
PUSH_CHECK_SUBJECT = "_INBOX.jsspark.spark"
# ... and a durable is bound as a pull consumer (``planning``), so the two cannot go together.
RATE_LIMIT_DURABLE = "rate_limit_bps needs a push consumer; a durable_name binds a pull consumer: drop one"


class OptionError(ValueError):
    """An option Spark passed that the source or sink cannot use; the message names it."""


def _canonical(names: tuple[str, ...]) -> dict[str, str]:
    return {n.lower(): n for n in names}


def storage_options(options: Mapping[str, str]) -> dict[str, str] | None:
    """The ``storage.<key>`` options as delta-rs ``storage_options`` (``None``: none given)."""
    out = {}
    for key, value in options.items():
        if key.lower().startswith(STORAGE_PREFIX):
            name = key[len(STORAGE_PREFIX):]
            if not name:
                raise OptionError(f"option {key!r} names no storage option: use {STORAGE_PREFIX}<key>, e.g. storage.aws_region")
            out[name] = str(value)
    return out or None


def prefixed_storage_options(storage: Mapping[str, str] | None) -> dict[str, str]:
    """delta-rs ``storage_options`` as ``storage.<key>`` source/sink options."""
    return {f"{STORAGE_PREFIX}{k}": str(v) for k, v in (storage or {}).items()}


def check_known(options: Mapping[str, str], allowed: tuple[str, ...], what: str) -> dict[str, str]:
    """Options keyed by their canonical spelling; an unknown one raises naming it. ``storage.*``
    options are not checked here (see ``storage_options``)."""
    known = _canonical(allowed)
    out: dict[str, str] = {}
    for key, value in options.items():
        if key.lower().startswith(STORAGE_PREFIX):
            continue
        canon = known.get(key.lower())
        if canon is None:
            raise OptionError(
                f"unknown option {key!r} for the jetstream {what}; known options: {', '.join(sorted(allowed))}"
            )
        out[canon] = str(value)
    return out


# Spark's interval text, as triggers and Kafka's ``maxTriggerDelay`` take it: "5 seconds", "500ms", "2 min".
INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)\s*$")
_INTERVAL_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def interval_seconds(text: str) -> float | None:
    """Seconds of a Spark interval (``INTERVAL``); ``None`` if ``text`` is not one."""
    m = INTERVAL.match(text.lower())
    if m is None:
        return None
    unit = m.group(2)
    return float(m.group(1)) * _INTERVAL_UNITS["ms" if unit.startswith(("ms", "milli")) else unit[0]]


# Kafka's default ``maxTriggerDelay``: how long a paced batch (``minMessagesPerTrigger``) waits at most.
DEFAULT_MAX_TRIGGER_DELAY = 900.0


def parse_interval(name: str, text: str) -> float:
    """Seconds of an interval option (``maxTriggerDelay``); an error naming it otherwise."""
    seconds = interval_seconds(text)
    if seconds is None:
        raise OptionError(f"option {name!r} must be an interval like '1 second' or '500ms', got {text!r}")
    return seconds


def parse_bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name!r} must be 'true' or 'false', got {text!r}")
    return value == "true"


def parse_int(name: str, text: str, minimum: int = 0) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {text!r}") from None
    if value < minimum:
        raise OptionError(f"option {name!r} must be >= {minimum}, got {value}")
    return value


def parse_subject_list(name: str, text: str) -> list[str]:
    """A JSON list (``["a.>", "b"]``) or a comma-separated list (``a.>,b``)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise OptionError(f"option {name!r} is not a valid JSON list: {e}") from None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise OptionError(f"option {name!r} must be a list of subjects, got {text!r}")
        return value
    return [s.strip() for s in stripped.split(",")] if stripped else []


def _enum(name: str, text: str, enum: type[Any]) -> Any:
    try:
        return enum(text.strip().lower())
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise OptionError(f"option {name!r} must be one of {allowed}; got {text!r}") from None


def consumer_config(opts: Mapping[str, str]) -> ConsumerConfig:
    """The ``ConsumerConfig`` a set of source options stands for (unchecked)."""
    from jsspark.config import AckPolicy, ConsumerConfig, DeliverPolicy, ReplayPolicy

    wire: dict[str, Any] = {}
    if "durable_name" in opts:
        wire["durable_name"] = opts["durable_name"]
    if "ack_policy" in opts:  # explicit/all: needed on work-queue streams; acked as batches commit
        wire["ack_policy"] = _enum("ack_policy", opts["ack_policy"], AckPolicy)
    if "max_ack_pending" in opts:  # a durable's batches deliver at most this many unacked (-1: no bound)
        wire["max_ack_pending"] = parse_int("max_ack_pending", opts["max_ack_pending"], -1)
    if "deliver_policy" in opts:
        wire["deliver_policy"] = _enum("deliver_policy", opts["deliver_policy"], DeliverPolicy)
    if "opt_start_seq" in opts:
        wire["opt_start_seq"] = parse_int("opt_start_seq", opts["opt_start_seq"])
    if "opt_start_time" in opts:
        wire["opt_start_time"] = opts["opt_start_time"].strip()
    if "filter_subject" in opts:
        wire["filter_subject"] = opts["filter_subject"]
    if "filter_subjects" in opts:
        wire["filter_subjects"] = parse_subject_list("filter_subjects", opts["filter_subjects"])
    if "headers_only" in opts:
        wire["headers_only"] = parse_bool("headers_only", opts["headers_only"])
    if "replay_policy" in opts:
        wire["replay_policy"] = _enum("replay_policy", opts["replay_policy"], ReplayPolicy)
    if "inactive_threshold" in opts:  # nanoseconds, as in the JSON, or a Go duration ("1h")
        text = opts["inactive_threshold"].strip()
        wire["inactive_threshold"] = int(text) if text.isdigit() else text
    if "rate_limit_bps" in opts:
        wire["rate_limit_bps"] = parse_int("rate_limit_bps", opts["rate_limit_bps"])
        if wire["rate_limit_bps"]:
            wire["deliver_subject"] = PUSH_CHECK_SUBJECT
    try:
        return ConsumerConfig.from_json(wire)  # a number its Go type does not hold: the server's 10025
    except ValueError as e:  # pydantic: e.g. an opt_start_time that is not RFC3339
        raise OptionError(f"invalid consumer option: {e}") from None


@dataclass(frozen=True)
class ReadOptions:
    """Everything the source needs, picklable (plain values and the checked config)."""

    location: str
    stream: str
    consumer: ConsumerConfig
    max_messages: int | None = None
    max_bytes: int | None = None
    # Kafka's minOffsetsPerTrigger / maxTriggerDelay (``pacing``): a batch waits until this many
    # messages are there or this long (seconds) has passed since the last batch
    min_messages: int | None = None
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY
    fail_on_data_loss: bool = True
    report_latest_offset: bool = False
    min_partitions: int = 1
    storage_options: dict[str, str] | None = field(default=None, repr=False)

    @property
    def filters(self) -> list[str]:
        c = self.consumer
        return list(c.filter_subjects) or ([c.filter_subject] if c.filter_subject else [])

    @property
    def consumer_name(self) -> str | None:
        return self.consumer.durable_name or None

    @property
    def replay_original(self) -> bool:
        from jsspark.config import ReplayPolicy

        return self.consumer.replay_policy is ReplayPolicy.ORIGINAL


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Parse and validate source options; consumer rules raise the server's ``APIError``."""
    opts = check_known(options, COMMON_OPTIONS + CONSUMER_OPTIONS + SPARK_READ_OPTIONS, "source")
    location, stream = _location_and_stream(opts)
    cfg = consumer_config(opts)
    if cfg.rate_limit_bps and cfg.durable_name:
        raise OptionError(RATE_LIMIT_DURABLE)
    storage = storage_options(options)
    from jsspark.config import check_consumer_config

    checked = check_consumer_config(cfg, lake_stream_config(location, stream, storage, "source"))
    return ReadOptions(
        location=location,
        stream=stream,
        consumer=checked,
        max_messages=parse_int("maxMessagesPerTrigger", opts["maxMessagesPerTrigger"], 1)
        if "maxMessagesPerTrigger" in opts
        else None,
        max_bytes=parse_int("maxBytesPerTrigger", opts["maxBytesPerTrigger"], 1) if "maxBytesPerTrigger" in opts else None,
        min_messages=parse_int("minMessagesPerTrigger", opts["minMessagesPerTrigger"], 1)
        if "minMessagesPerTrigger" in opts
        else None,
        max_trigger_delay=parse_interval("maxTriggerDelay", opts["maxTriggerDelay"])
        if "maxTriggerDelay" in opts
        else DEFAULT_MAX_TRIGGER_DELAY,
        fail_on_data_loss=parse_bool("failOnDataLoss", opts.get("failOnDataLoss", "true")),
        report_latest_offset=parse_bool("reportLatestOffset", opts.get("reportLatestOffset", "false")),
        min_partitions=parse_int("minPartitions", opts.get("minPartitions", "1"), 1),
        storage_options=storage,
    )


@dataclass(frozen=True)
class WriteOptions:
    """Sink options. ``dedup_by_origin``: rows of a streaming write that carry the jetstream
    source's ``stream`` and ``seq`` columns are published at most once per origin message (a
    batch write stores every row: see ``lake_sink``).
    ``ack_source``: after its Delta commit a streaming sink acks the durable consumers the
    batch was read from (their offsets in ``<checkpointLocation>/offsets/<batchId>``).
    ``form``: ``None`` publishes (new sequences, publish checks); ``"mirror"``/``"source"`` land
    origin messages as a mirror/sourcing stream stores them (``engine.ingest``), so rows from the
    live NATS source keep their origin sequence and time, or gain ``Nats-Stream-Source``.
    ``origin``: with a form, the mirror's or source's ``StreamSource`` as JSON (filter, transforms,
    external): which rows are taken, their stored subject, the header's iname. Default: the target
    stream's own ``mirror`` / matching ``sources`` entry. ``origin_identity``: the origin's
    creation-time hash appended to ``Nats-Stream-Source`` (as 2.15 servers write it)."""

    location: str
    stream: str
    checkpoint_location: str | None = None
    txn_app_id: str | None = None
    dedup_by_origin: bool = True
    ack_source: bool = True
    form: str | None = None
    origin: str | None = None
    origin_identity: str | None = None
    storage_options: dict[str, str] | None = field(default=None, repr=False)


def lake_stream_config(location: str, stream: str, storage: dict[str, str] | None, who: str) -> StreamConfig:
    """The lake stream's config, or the lake's error (``stream not found``, a name no stream can
    have) with a note naming the option and the lake (``who``: "source", "sink"): when the reader
    or writer is made, before a task runs."""
    import jsspark
    from jsspark.errors import APIError, SubjectError

    with scrubbed(storage):
        try:
            return jsspark.connect(location, storage).stream(stream).config  # no state: the catalog only
        except (APIError, SubjectError) as e:  # the lake's error, as it is; the note says where
            e.add_note(f"jetstream {who}: option stream {stream!r}, lake {redact_storage(location, storage)}")
            raise


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Parse sink options; the target stream must exist (a missing one failed only at the commit,
    after every task ran, or not at all for no rows)."""
    from jsspark.engine.files import place

    opts = check_known(options, COMMON_OPTIONS + SINK_OPTIONS, "sink")
    location, stream = _location_and_stream(opts)
    lake_stream_config(location, stream, storage_options(options), "sink")
    if opts.get("checkpointLocation"):  # the sink reads it too: a place it cannot read fails here, not at a commit
        place(opts["checkpointLocation"])
    return WriteOptions(
        location,
        stream,
        opts.get("checkpointLocation"),
        opts.get("txnAppId"),
        parse_bool("dedupByOrigin", opts.get("dedupByOrigin", "true")),
        parse_bool("ackSource", opts.get("ackSource", "true")),
        parse_form(opts.get("form")),
        _origin_json(opts.get("origin")),
        opts.get("originIdentity"),
        storage_options(options),
    )


def _origin_json(text: str | None) -> str | None:
    """The sink's ``origin`` option, checked as a ``StreamSource`` at start, so a typo fails
    before any message lands rather than landing under the wrong subject or iname."""
    if text is None:
        return None
    from jsspark.config import StreamSource

    try:
        source = StreamSource.model_validate(json.loads(text))
    except (ValueError, TypeError) as e:
        raise OptionError(f"option 'origin' must be a StreamSource as JSON (name, filter_subject, "
                          f"subject_transforms, ...): {e}") from None
    unknown = source.unknown_field()  # the model keeps unknown keys; a server's decoder refuses them
    if unknown is not None:
        raise OptionError(f"option 'origin': unknown field {unknown!r} in the StreamSource JSON (its fields: "
                          f"{', '.join(StreamSource.model_fields)})")
    return text


def parse_form(text: str | None) -> str | None:
    """The sink's ``form`` option: absent keeps publishing; a typo must not silently publish
    (new sequences) what the user meant to mirror, so an unknown value fails at start."""
    if text is None:
        return None
    from jsspark.engine.ingest import LANDING_FORMS

    value = text.strip().lower()
    if value not in LANDING_FORMS:
        raise OptionError(
            f"option 'form' must be one of {', '.join(repr(f) for f in LANDING_FORMS)} (or absent to publish), "
            f"got {text!r}"
        )
    return value


def _location_and_stream(opts: Mapping[str, str]) -> tuple[str, str]:
    location = opts.get("path", "").strip()
    if not location:
        raise OptionError("the jetstream format needs the lake location: .load(location) / .save(location)")
    stream = opts.get("stream", "").strip()
    if not stream:
        raise OptionError("option 'stream' is required: the name of the lake stream")
    return location, stream
