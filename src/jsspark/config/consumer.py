"""The consumer configuration model, field for field the server's ``ConsumerConfig`` JSON."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import Field

from jsspark.config.durations import Duration, seconds_to_nanoseconds
from jsspark.config.enums import AckPolicy, DeliverPolicy, PriorityPolicy, ReplayPolicy
from jsspark.config.integers import Int, UInt64
from jsspark.config.stream import StreamConfig
from jsspark.config.timestamps import Timestamp
from jsspark.config.wire import WireModel, nats_py_to_wire

_NATS_PY_SECONDS = ("ack_wait", "idle_heartbeat", "inactive_threshold", "max_expires", "priority_timeout")


class ConsumerConfig(WireModel):
    """A consumer's configuration; defaults are Go's zero values, as in a raw create request.

    ``with_server_defaults(stream)`` gives what the server stores, ``check_consumer_config()``
    also validates it with the server's errors.
    """

    _go_request: ClassVar[str] = "CreateConsumerRequest.config"
    _always: ClassVar[frozenset[str]] = frozenset(
        {"deliver_policy", "ack_policy", "replay_policy", "num_replicas"}
    )

    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: DeliverPolicy = DeliverPolicy.ALL
    opt_start_seq: UInt64 = 0
    opt_start_time: Timestamp | None = None
    ack_policy: AckPolicy = AckPolicy.NONE
    ack_wait: Duration = 0
    max_deliver: Int = 0
    backoff: list[Duration] = Field(default_factory=list)
    filter_subject: str = ""
    filter_subjects: list[str] = Field(default_factory=list)
    replay_policy: ReplayPolicy = ReplayPolicy.INSTANT
    rate_limit_bps: UInt64 = 0
    sample_freq: str = ""
    max_waiting: Int = 0
    max_ack_pending: Int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: Int = 0
    max_expires: Duration = 0
    max_bytes: Int = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: Duration = 0
    inactive_threshold: Duration = 0
    num_replicas: Int = 0
    mem_storage: bool = False
    direct: bool = False
    sourcing: bool = False
    metadata: dict[str, str] = Field(default_factory=dict)
    pause_until: Timestamp | None = None
    priority_groups: list[str] = Field(default_factory=list)
    priority_policy: PriorityPolicy = PriorityPolicy.NONE
    priority_timeout: Duration = 0

    @property
    def is_durable(self) -> bool:
        """The server's ``isDurableConsumer``: only ``durable_name`` makes a consumer durable."""
        return bool(self.durable_name)

    @property
    def is_push(self) -> bool:
        return bool(self.deliver_subject)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> Self:
        """Build from nats-py ``ConsumerConfig``-style keywords (durations and ``backoff`` in
        float seconds, ``None`` meaning unset)."""
        wire = nats_py_to_wire(kwargs)
        for key in _NATS_PY_SECONDS:
            if key in wire:
                wire[key] = seconds_to_nanoseconds(wire[key])
        if "backoff" in wire:
            wire["backoff"] = [seconds_to_nanoseconds(b) for b in wire["backoff"]]
        return cls.from_json(wire)  # a value the server cannot decode is its 10025, as from JSON

    def with_server_defaults(self, stream: StreamConfig) -> ConsumerConfig:
        """What the server stores for this consumer on ``stream`` (``setConsumerConfigDefaults``
        plus the ephemeral inactivity default), unchecked."""
        from jsspark.config.defaults import apply_consumer_defaults

        return apply_consumer_defaults(self, stream)
