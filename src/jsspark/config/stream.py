"""Stream configuration models, field for field the server's ``StreamConfig`` JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Self

from pydantic import Field

from jsspark.config.durations import Duration, seconds_to_nanoseconds
from jsspark.config.enums import Compression, DiscardPolicy, PersistMode, RetentionPolicy, StorageType
from jsspark.config.integers import Int, Int32, Int64, UInt64
from jsspark.config.timestamps import Timestamp
from jsspark.config.wire import WireModel, nats_py_to_wire


class SubjectTransform(WireModel):
    """A subject mapping ``{src, dest}`` (the server's ``SubjectTransformConfig``)."""

    _always: ClassVar[frozenset[str]] = frozenset({"src", "dest"})

    src: str = ""
    dest: str = ""


class RePublish(WireModel):
    """Re-publish stored messages matching ``src`` to the mapped ``dest`` (at most once)."""

    _always: ClassVar[frozenset[str]] = frozenset({"dest"})

    src: str = ""
    dest: str = ""
    headers_only: bool = False


class Placement(WireModel):
    """Cluster placement; kept for round trips, a lake stream has no cluster to place on."""

    cluster: str = ""
    tags: list[str] = Field(default_factory=list)
    preferred: str = ""


class ExternalStream(WireModel):
    """An origin in another account or domain, reached through API and deliver prefixes."""

    _always: ClassVar[frozenset[str]] = frozenset({"api", "deliver"})

    api: str = ""
    deliver: str = ""


class StreamConsumerSource(WireModel):
    """The durable consumer a mirror or source reads through (durable sourcing, 2.14+).

    ``server_managed`` is from the durable-sourcing design (revision 3); nats-server 2.15.1
    does not know it and rejects any request carrying it, so it is ``None`` unless given.
    """

    _unknown_to_server: ClassVar[frozenset[str]] = frozenset({"server_managed"})

    name: str = ""
    server_managed: bool | None = None
    deliver_subject: str = ""


class StreamSource(WireModel):
    """A mirror or one of the sources of a stream."""

    _always: ClassVar[frozenset[str]] = frozenset({"name"})

    name: str = ""
    opt_start_seq: UInt64 = 0
    opt_start_time: Timestamp | None = None
    filter_subject: str = ""
    subject_transforms: list[SubjectTransform] = Field(default_factory=list)
    external: ExternalStream | None = None
    consumer: StreamConsumerSource | None = None


class StreamConsumerLimits(WireModel):
    """Defaults and ceilings applied to every consumer of the stream."""

    inactive_threshold: Duration = 0
    max_ack_pending: Int = 0


_NATS_PY_SECONDS = ("max_age", "duplicate_window", "subject_delete_marker_ttl")


class StreamConfig(WireModel):
    """A stream's configuration; defaults are Go's zero values, as in a raw create request.

    ``with_server_defaults()`` gives what the server stores for it, ``check_stream_config()``
    also validates it with the server's errors.
    """

    _go_request: ClassVar[str] = "StreamConfigRequest"
    _always: ClassVar[frozenset[str]] = frozenset(
        {
            "name", "retention", "max_consumers", "max_msgs", "max_bytes", "max_age",
            "max_msgs_per_subject", "discard", "storage", "num_replicas", "compression",
            "allow_direct", "mirror_direct", "sealed", "deny_delete", "deny_purge",
            "allow_rollup_hdrs", "consumer_limits", "allow_msg_ttl",
        }
    )  # fmt: skip

    name: str = ""
    description: str = ""
    subjects: list[str] = Field(default_factory=list)
    retention: RetentionPolicy = RetentionPolicy.LIMITS
    max_consumers: Int = 0
    max_msgs: Int64 = 0
    max_bytes: Int64 = 0
    max_age: Duration = 0
    max_msgs_per_subject: Int64 = 0
    max_msg_size: Int32 = 0
    discard: DiscardPolicy = DiscardPolicy.OLD
    storage: StorageType = StorageType.FILE
    num_replicas: Int = 0
    no_ack: bool = False
    duplicate_window: Duration = 0
    placement: Placement | None = None
    mirror: StreamSource | None = None
    sources: list[StreamSource] = Field(default_factory=list)
    compression: Compression = Compression.NONE
    first_seq: UInt64 = 0
    subject_transform: SubjectTransform | None = None
    republish: RePublish | None = None
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: StreamConsumerLimits = Field(default_factory=StreamConsumerLimits)
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: Duration = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    persist_mode: PersistMode = PersistMode.DEFAULT
    allow_batched: bool = False
    metadata: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> Self:
        """Build from nats-py ``StreamConfig``-style keywords: durations in float seconds,
        nested nats-py objects (``StreamSource``, ``Placement``, ...) taken via ``as_dict()``,
        ``None`` meaning unset."""
        wire = nats_py_to_wire(kwargs)
        for key in _NATS_PY_SECONDS:
            if key in wire:
                wire[key] = seconds_to_nanoseconds(wire[key])
        return cls.from_json(wire)  # a value the server cannot decode is its 10025, as from JSON

    def with_server_defaults(
        self, lookup: Callable[[str], StreamConfig | None] | None = None
    ) -> StreamConfig:
        """What the server stores for this config (``addStream``'s defaults), unchecked.

        ``lookup`` finds other streams by name: a mirror inherits its origin's ``allow_direct``.
        """
        from jsspark.config.defaults import apply_stream_defaults

        return apply_stream_defaults(self, lookup)
