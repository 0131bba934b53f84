"""JetStream stream and consumer configuration: models with the server's JSON shape, its
defaults, and its validation with the same error codes and texts."""

from __future__ import annotations

from jsspark.config.consumer import ConsumerConfig
from jsspark.config.defaults import (
    DYNAMIC_METADATA_KEYS,
    REQUIRED_LEVEL_KEY,
    apply_consumer_defaults,
    apply_stream_defaults,
)
from jsspark.config.durations import Duration, format_go_duration, parse_go_duration
from jsspark.config.enums import (
    AckPolicy,
    Compression,
    DeliverPolicy,
    DiscardPolicy,
    PersistMode,
    PriorityPolicy,
    ReplayPolicy,
    RetentionPolicy,
    StorageType,
)
from jsspark.config.ignored import ignored_fields, refuse_unsupported, report_ignored_fields
from jsspark.config.loading import load_consumer_config, load_stream_config
from jsspark.config.stream import (
    ExternalStream,
    Placement,
    RePublish,
    StreamConfig,
    StreamConsumerLimits,
    StreamConsumerSource,
    StreamSource,
    SubjectTransform,
)
from jsspark.config.timestamps import Timestamp, UTCTime
from jsspark.config.update import check_stream_update
from jsspark.config.validation import check_consumer_config, check_decodable, check_stream_config

__all__ = [
    "DYNAMIC_METADATA_KEYS",
    "REQUIRED_LEVEL_KEY",
    "AckPolicy",
    "Compression",
    "ConsumerConfig",
    "DeliverPolicy",
    "DiscardPolicy",
    "Duration",
    "ExternalStream",
    "PersistMode",
    "Placement",
    "PriorityPolicy",
    "RePublish",
    "ReplayPolicy",
    "RetentionPolicy",
    "StorageType",
    "StreamConfig",
    "StreamConsumerLimits",
    "StreamConsumerSource",
    "StreamSource",
    "SubjectTransform",
    "Timestamp",
    "UTCTime",
    "apply_consumer_defaults",
    "apply_stream_defaults",
    "check_consumer_config",
    "check_decodable",
    "check_stream_config",
    "check_stream_update",
    "format_go_duration",
    "ignored_fields",
    "load_consumer_config",
    "load_stream_config",
    "parse_go_duration",
    "refuse_unsupported",
    "report_ignored_fields",
]
