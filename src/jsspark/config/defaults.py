"""The defaults the server fills in when it stores a stream or consumer config.

Each step is a port of one block of ``checkStreamCfgLocked`` / ``setConsumerConfigDefaults``
and mutates the config it is given. In pedantic mode the server refuses to fill a default and
answers with an error instead, so the steps take ``pedantic`` and raise that error;
``validation`` runs them interleaved with the checks, in the server's order.
"""

from __future__ import annotations

from collections.abc import Callable

from jsspark.config.consumer import ConsumerConfig
from jsspark.config.durations import MINUTE, SECOND
from jsspark.config.enums import AckPolicy, PersistMode, PriorityPolicy
from jsspark.config.stream import Placement, StreamConfig
from jsspark.errors import APIError, api_error

REQUIRED_LEVEL_KEY = "_nats.req.level"
SERVER_VERSION_KEY = "_nats.ver"
SERVER_LEVEL_KEY = "_nats.level"
DYNAMIC_METADATA_KEYS = (SERVER_VERSION_KEY, SERVER_LEVEL_KEY)
"""Metadata the server adds to every response but never stores."""

DEFAULT_DUPLICATE_WINDOW = 2 * MINUTE
DEFAULT_ACK_WAIT = 30 * SECOND
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512
DEFAULT_PINNED_TTL = 2 * MINUTE
EPHEMERAL_INACTIVE_THRESHOLD = 5 * SECOND
SOURCE_HEARTBEAT = SECOND
"""Heartbeat of sourcing consumers, the only one the ``flow_control`` ack policy allows."""

StreamLookup = Callable[[str], StreamConfig | None]


def _pedantic(text: str) -> APIError:
    return api_error("JSPedanticErrF", err=text)


def set_static_stream_metadata(cfg: StreamConfig) -> None:
    """Record the API level the stream's features need; drop response-only keys."""
    level = 0
    if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0:
        level = max(level, 1)
    if (
        cfg.allow_msg_counter
        or cfg.allow_atomic
        or cfg.allow_msg_schedules
        or cfg.persist_mode is PersistMode.ASYNC
    ):
        level = max(level, 2)
    if cfg.allow_batched:
        level = max(level, 4)
    _set_required_level(cfg.metadata, level)


def set_static_consumer_metadata(cfg: ConsumerConfig) -> None:
    """Record the API level the consumer's features need; drop response-only keys."""
    level = 0
    if cfg.pause_until is not None:
        level = 1
    if cfg.priority_policy is not PriorityPolicy.NONE or cfg.priority_timeout != 0 or cfg.priority_groups:
        level = 1
    if cfg.ack_policy is AckPolicy.FLOW_CONTROL:
        level = 4
    _set_required_level(cfg.metadata, level)


def _set_required_level(metadata: dict[str, str], level: int) -> None:
    for key in DYNAMIC_METADATA_KEYS:
        metadata.pop(key, None)
    metadata[REQUIRED_LEVEL_KEY] = str(level)


def default_replicas(cfg: StreamConfig) -> None:
    if cfg.num_replicas == 0:
        cfg.num_replicas = 1


def default_stream_limits(cfg: StreamConfig, pedantic: bool) -> None:
    """Zero or below -1 means unlimited: -1."""
    for field in ("max_msgs", "max_msgs_per_subject", "max_bytes", "max_msg_size", "max_consumers"):
        value = getattr(cfg, field)
        if value == 0 or value < -1:
            if pedantic and value < -1:
                raise _pedantic(f"{field} must be set to -1")
            setattr(cfg, field, -1)


def default_duplicate_window(cfg: StreamConfig, pedantic: bool) -> None:
    """2m, or max_age when smaller; never for a mirror or a sourcing stream."""
    if cfg.duplicate_window != 0 or cfg.mirror is not None or cfg.sources:
        return
    if cfg.max_age != 0 and cfg.max_age < DEFAULT_DUPLICATE_WINDOW:
        if pedantic:
            raise _pedantic("duplicate window cannot be bigger than max age")
        cfg.duplicate_window = cfg.max_age
    else:
        cfg.duplicate_window = DEFAULT_DUPLICATE_WINDOW


def default_delete_marker_flags(cfg: StreamConfig, pedantic: bool) -> None:
    """Delete markers need message TTLs and roll-ups (which in turn need purge)."""
    if cfg.subject_delete_marker_ttl <= 0:
        return
    if not cfg.allow_msg_ttl:
        if pedantic:
            raise api_error(
                "JSStreamInvalidConfigF",
                err="subject delete marker cannot be set if message TTLs are disabled",
            )
        cfg.allow_msg_ttl = True
    if not cfg.allow_rollup_hdrs:
        if pedantic:
            raise api_error(
                "JSStreamInvalidConfigF", err="subject delete marker cannot be set if roll-ups are disabled"
            )
        cfg.allow_rollup_hdrs, cfg.deny_purge = True, False


def default_schedule_flags(cfg: StreamConfig, pedantic: bool) -> None:
    """Message schedules need roll-ups."""
    if cfg.allow_msg_schedules and not cfg.allow_rollup_hdrs:
        if pedantic:
            raise api_error(
                "JSStreamInvalidConfigF", err="message scheduling cannot be set if roll-ups are disabled"
            )
        cfg.allow_rollup_hdrs, cfg.deny_purge = True, False


def default_mirror_direct(cfg: StreamConfig, lookup: StreamLookup | None, pedantic: bool) -> None:
    """A local mirror inherits its origin's ``allow_direct`` when the origin is known."""
    if cfg.mirror is None or cfg.mirror.external is not None or lookup is None:
        return
    origin = lookup(cfg.mirror.name)
    if origin is None:
        return
    if pedantic and cfg.mirror_direct != origin.allow_direct:
        raise _pedantic("origin stream has direct get set, mirror has it disabled")
    cfg.mirror_direct = origin.allow_direct


def default_subjects(cfg: StreamConfig) -> None:
    """A plain stream without subjects captures its own name."""
    if not cfg.subjects and cfg.mirror is None and not cfg.sources:
        cfg.subjects = [cfg.name]


def default_republish(cfg: StreamConfig, pedantic: bool) -> None:
    """Empty ``src`` means ``>``; ``>``→``>`` behind a subject transform of the only subject
    republishes the transformed subjects (implicit republish)."""
    rp = cfg.republish
    if rp is None:
        return
    if rp.src == "":
        if pedantic:
            raise _pedantic("republish source can not be empty")
        rp.src = ">"
    st = cfg.subject_transform
    if (
        rp.dest == ">"
        and rp.src == ">"
        and st is not None
        and len(cfg.subjects) == 1
        and st.src == cfg.subjects[0]
    ):
        if pedantic:
            raise _pedantic("implicit republish based on subject transform")
        rp.src = rp.dest = st.dest


def default_placement(cfg: StreamConfig) -> None:
    """An empty placement object is the same as none."""
    if cfg.placement is not None and cfg.placement == Placement() and not cfg.placement.model_extra:
        cfg.placement = None


def apply_stream_defaults(cfg: StreamConfig, lookup: StreamLookup | None = None) -> StreamConfig:
    """A copy of ``cfg`` with every default ``addStream`` fills in (no validation)."""
    out = cfg.model_copy(deep=True)
    set_static_stream_metadata(out)
    default_replicas(out)
    default_stream_limits(out, pedantic=False)
    default_duplicate_window(out, pedantic=False)
    default_delete_marker_flags(out, pedantic=False)
    default_schedule_flags(out, pedantic=False)
    default_mirror_direct(out, lookup, pedantic=False)
    default_subjects(out)
    default_republish(out, pedantic=False)
    default_placement(out)
    return out


def default_consumer_name(cfg: ConsumerConfig) -> None:
    """Every create API names a durable after its durable name."""
    if cfg.durable_name and not cfg.name:
        cfg.name = cfg.durable_name


def set_consumer_config_defaults(cfg: ConsumerConfig, stream: StreamConfig, pedantic: bool) -> None:
    """Port of ``setConsumerConfigDefaults`` (no server or account limits configured)."""
    if cfg.max_deliver == 0 or cfg.max_deliver < -1:
        if pedantic and cfg.max_deliver < -1:
            raise _pedantic("max_deliver must be set to -1")
        cfg.max_deliver = -1
    if cfg.max_waiting < 0:
        if pedantic:
            raise _pedantic("max_waiting must not be negative")
        cfg.max_waiting = 0
    if cfg.max_ack_pending < -1:
        if pedantic:
            raise _pedantic("max_ack_pending must be set to -1")
        cfg.max_ack_pending = -1
    for field in (
        "max_batch",
        "max_expires",
        "max_bytes",
        "idle_heartbeat",
        "inactive_threshold",
        "priority_timeout",
    ):
        if getattr(cfg, field) < 0:
            if pedantic:
                raise _pedantic(f"{field} must not be negative")
            setattr(cfg, field, 0)

    if not cfg.deliver_subject and cfg.max_waiting == 0:
        cfg.max_waiting = DEFAULT_MAX_WAITING
    if cfg.ack_wait == 0 and cfg.ack_policy in (AckPolicy.EXPLICIT, AckPolicy.ALL):
        cfg.ack_wait = DEFAULT_ACK_WAIT
    if cfg.backoff:
        if pedantic and cfg.ack_wait != cfg.backoff[0]:
            raise _pedantic("first backoff value has to equal batch AckWait")
        cfg.ack_wait = cfg.backoff[0]
    limits = stream.consumer_limits
    if cfg.max_ack_pending == 0:
        if pedantic and limits.max_ack_pending > 0:
            raise _pedantic("max_ack_pending must be set if it's configured in stream limits")
        cfg.max_ack_pending = limits.max_ack_pending
    if cfg.inactive_threshold == 0:
        if pedantic and limits.inactive_threshold > 0:
            raise _pedantic("inactive_threshold must be set if it's configured in stream limits")
        cfg.inactive_threshold = limits.inactive_threshold
    if cfg.max_ack_pending == 0 and cfg.ack_policy is not AckPolicy.NONE:
        cfg.max_ack_pending = DEFAULT_MAX_ACK_PENDING
    if cfg.priority_policy is PriorityPolicy.PINNED_CLIENT and cfg.priority_timeout == 0:
        cfg.priority_timeout = DEFAULT_PINNED_TTL
    if cfg.ack_policy is AckPolicy.FLOW_CONTROL and not pedantic:
        cfg.flow_control = True
        cfg.idle_heartbeat = SOURCE_HEARTBEAT


def default_ephemeral_inactive_threshold(cfg: ConsumerConfig) -> None:
    """Ephemerals always expire: 5s unless set (``updateInactiveThreshold``)."""
    if not cfg.is_durable and cfg.inactive_threshold <= 0:
        cfg.inactive_threshold = EPHEMERAL_INACTIVE_THRESHOLD


def apply_consumer_defaults(cfg: ConsumerConfig, stream: StreamConfig) -> ConsumerConfig:
    """A copy of ``cfg`` with every default the server fills in for ``stream`` (no validation)."""
    out = cfg.model_copy(deep=True)
    default_consumer_name(out)
    set_static_consumer_metadata(out)
    set_consumer_config_defaults(out, stream, pedantic=False)
    default_ephemeral_inactive_threshold(out)
    return out
