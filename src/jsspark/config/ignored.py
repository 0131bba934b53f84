"""Config fields a lake stream keeps but does not honour, and those it refuses.

A Delta-backed stream has no cluster to place on, no replicas to keep in sync and no memory
store. Such settings are kept (they round-trip and reach a real server unchanged) and
reported once per stream name and field, so nothing is dropped silently.

Message counters, schedules, atomic and fast batch publish change what a publish stores and
answers; a lake stream has none of them, so a config enabling one is refused.
"""

from __future__ import annotations

import threading
import warnings

from jsspark.config.enums import StorageType
from jsspark.config.stream import StreamConfig
from jsspark.errors import ConfigIgnoredWarning, UnsupportedConfigError

LAKE_MAX_SEQ = 2**63 - 1  # the last seq a lake stream's int64 seq column holds (engine.schema.MAX_SEQ)

_reported: set[tuple[str, str]] = set()
_lock = threading.Lock()


def ignored_fields(cfg: StreamConfig) -> dict[str, object]:
    """The settings of ``cfg`` a lake stream ignores, by wire field name."""
    found: dict[str, object] = {}
    if cfg.placement is not None:
        found["placement"] = cfg.placement.to_json()
    if cfg.num_replicas > 1:
        found["num_replicas"] = cfg.num_replicas
    if cfg.storage is StorageType.MEMORY:
        found["storage"] = cfg.storage.value
    return found


UNSUPPORTED = {
    "allow_msg_counter": "message counters",
    "allow_msg_schedules": "message schedules",
    "allow_atomic": "atomic batch publish",
    "allow_batched": "fast batch publish",  # the lake's own publish_batch is one commit per call
}


def refuse_unsupported(cfg: StreamConfig) -> None:
    """Raise ``UnsupportedConfigError`` naming the first enabled feature a lake stream lacks,
    or a ``first_seq`` past its int64 sequences (the server's are uint64)."""
    for key, feature in UNSUPPORTED.items():
        if getattr(cfg, key):
            raise UnsupportedConfigError(
                f"stream {cfg.name!r}: {key} is not supported by a lake stream ({feature} are not "
                "implemented); create the lake stream without it, or keep this stream on a nats-server"
            )
    if cfg.first_seq > LAKE_MAX_SEQ:
        raise UnsupportedConfigError(
            f"stream {cfg.name!r}: first_seq {cfg.first_seq} is past a lake stream's last sequence "
            f"{LAKE_MAX_SEQ} (its seq column is int64)"
        )


def report_ignored_fields(cfg: StreamConfig) -> dict[str, object]:
    """Warn (``ConfigIgnoredWarning``) about ignored settings not yet reported for this
    stream name; returns every ignored setting of ``cfg``."""
    found = ignored_fields(cfg)
    with _lock:
        new = {k: v for k, v in found.items() if (cfg.name, k) not in _reported}
        _reported.update((cfg.name, k) for k in new)
    if new:
        listed = ", ".join(f"{k}={v!r}" for k, v in new.items())
        warnings.warn(
            f"stream {cfg.name!r}: {listed} kept but not honoured by a lake stream",
            ConfigIgnoredWarning,
            stacklevel=2,
        )
    return found
