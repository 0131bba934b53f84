"""JetStream's config enums; each value is the string the server reads and writes in JSON."""

from __future__ import annotations

from enum import StrEnum


class RetentionPolicy(StrEnum):
    """When a stored message may be removed."""

    LIMITS = "limits"
    INTEREST = "interest"
    WORK_QUEUE = "workqueue"


class DiscardPolicy(StrEnum):
    """What gives way when a limit is reached: the oldest message, or the new one."""

    OLD = "old"
    NEW = "new"

    @classmethod
    def _missing_(cls, value: object) -> DiscardPolicy | None:
        """The server's decoder lower-cases it first (``"OLD"`` is ``old``)."""
        return cls.__members__.get(value.upper()) if isinstance(value, str) else None


class StorageType(StrEnum):
    """Server storage backend; a lake stream stores in Delta either way."""

    FILE = "file"
    MEMORY = "memory"


class Compression(StrEnum):
    """Server store compression."""

    NONE = "none"
    S2 = "s2"


class PersistMode(StrEnum):
    """Server flush behaviour (2.12+)."""

    DEFAULT = "default"
    ASYNC = "async"

    @classmethod
    def _missing_(cls, value: object) -> PersistMode | None:
        """The server's decoder reads ``""`` as the default."""
        return cls.DEFAULT if value == "" else None


class DeliverPolicy(StrEnum):
    """Where a consumer starts."""

    ALL = "all"
    LAST = "last"
    NEW = "new"
    BY_START_SEQUENCE = "by_start_sequence"
    BY_START_TIME = "by_start_time"
    LAST_PER_SUBJECT = "last_per_subject"

    @classmethod
    def _missing_(cls, value: object) -> DeliverPolicy | None:
        """The server's decoder reads ``"undefined"`` as ``all``."""
        return cls.ALL if value == "undefined" else None


class AckPolicy(StrEnum):
    """How deliveries are acknowledged; ``flow_control`` acks via flow-control replies (2.14+)."""

    NONE = "none"
    ALL = "all"
    EXPLICIT = "explicit"
    FLOW_CONTROL = "flow_control"


class ReplayPolicy(StrEnum):
    """Deliver as fast as possible, or at the original publish pace."""

    INSTANT = "instant"
    ORIGINAL = "original"


class PriorityPolicy(StrEnum):
    """Pull consumer priority groups (2.11+)."""

    NONE = "none"
    OVERFLOW = "overflow"
    PINNED_CLIENT = "pinned_client"
    PRIORITIZED = "prioritized"
