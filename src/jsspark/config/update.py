"""Stream config updates with the server's error codes, texts and order of checks.

``check_stream_update`` is what ``$JS.API.STREAM.UPDATE.<name>`` does on a standalone server
(``jsStreamUpdateRequest``, ``configUpdateCheckLocked``, ``stream.updateWithAdvisory``) to an
existing stream's stored config and a new one. The new config goes through the checks create
and update share, but not the create API's own (so ``sealed`` is allowed) nor ``addStream``'s
re-check of plain source filters (an update accepts ``filter_subject: "a..b"``). Rules that
need other assets are the engine's: subject overlap with other streams (10065), consumers
above new consumer limits, account and server storage limits.
"""

from __future__ import annotations

from jsspark.config.defaults import StreamLookup, apply_stream_defaults, set_static_stream_metadata
from jsspark.config.enums import DiscardPolicy, RetentionPolicy
from jsspark.config.ignored import report_ignored_fields
from jsspark.config.stream import StreamConfig, StreamSource
from jsspark.config.validation import (
    check_decodable,
    check_shared_stream_config,
    check_stream_identity,
    transform_error,
)
from jsspark.errors import APIError, api_error


def _invalid(text: str) -> APIError:
    return api_error("JSStreamInvalidConfigF", err=text)


def _mirror_identity(src: StreamSource) -> tuple[object, ...]:
    """What Go's ``reflect.DeepEqual`` sees of a mirror: its JSON, and whether
    ``subject_transforms`` was sent as an empty list (a non-nil empty slice is not nil)."""
    empty_list = "subject_transforms" in src.model_fields_set and not src.subject_transforms
    return (src.to_json(), empty_list)


def check_stream_update(
    old: StreamConfig,
    new: StreamConfig,
    *,
    pedantic: bool = False,
    lookup: StreamLookup | None = None,
) -> StreamConfig:
    """Validate an update of the stream stored as ``old`` to ``new`` as a standalone server
    does and return the config it then stores, or raise the server's ``APIError``.

    ``lookup`` resolves other streams by name, as for ``check_stream_config``. Like create,
    ``num_replicas`` 2-5 is accepted for a lake stream (the server answers 10074) and reported
    by ``report_ignored_fields``.
    """
    check_decodable(new)
    cfg = check_shared_stream_config(new, pedantic=pedantic, lookup=lookup)
    # The update subject names the stored stream; a body naming another one is refused
    # before the stream is looked up, so "name must match original" is never reached.
    if cfg.name != old.name:
        raise api_error("JSStreamMismatchErr")
    set_static_stream_metadata(cfg)
    # configUpdateCheckLocked runs the shared checks again; only the metadata size can
    # change its answer, now that the required API level is recorded.
    check_stream_identity(cfg)
    _check_compatible(apply_stream_defaults(old), cfg)
    if cfg.sealed:
        cfg.max_age = 0
        cfg.discard = DiscardPolicy.NEW
        cfg.deny_delete = cfg.deny_purge = True
        cfg.allow_rollup_hdrs = False
    _finish_republish(cfg)
    report_ignored_fields(cfg)
    return cfg


def _check_compatible(old: StreamConfig, cfg: StreamConfig) -> None:
    """The part of ``configUpdateCheckLocked`` comparing the new config with the stored one:
    what a stored stream cannot take back or switch without rebuilding its data."""
    if cfg.storage is not old.storage:
        raise _invalid("stream configuration update can not change storage type")
    if cfg.retention is not old.retention and RetentionPolicy.WORK_QUEUE in (old.retention, cfg.retention):
        raise _invalid("stream configuration update can not change retention policy to/from workqueue")
    if old.sealed and not cfg.sealed:
        raise _invalid("stream configuration update can not unseal a sealed stream")
    if old.deny_delete and not cfg.deny_delete:
        raise _invalid("stream configuration update can not cancel deny message deletes")
    if old.deny_purge and not cfg.deny_purge:
        raise _invalid("stream configuration update can not cancel deny purge")
    # Dropping the mirror promotes it to a normal stream; adding or changing one is refused.
    if cfg.mirror is not None and (
        old.mirror is None or _mirror_identity(cfg.mirror) != _mirror_identity(old.mirror)
    ):
        raise api_error("JSStreamMirrorNotUpdatableErr")
    if old.allow_msg_ttl and not cfg.allow_msg_ttl:
        raise _invalid("message TTL status can not be disabled")
    if cfg.allow_msg_counter != old.allow_msg_counter:
        raise _invalid("stream configuration update can not change message counter setting")
    if old.allow_msg_schedules and not cfg.allow_msg_schedules:
        raise _invalid("message schedules can not be disabled")
    if cfg.persist_mode is not old.persist_mode:
        raise _invalid("stream configuration update can not change persist mode")


def _finish_republish(cfg: StreamConfig) -> None:
    """``updateWithAdvisory`` turns an empty republish ``dest`` into ``>`` (create keeps it
    empty) and builds the transform only then, so a source with partial wildcards that
    passed the shared checks fails here, as a 10069 update error."""
    rp = cfg.republish
    if rp is None:
        return
    if rp.src == "":
        rp.src = ">"
    if rp.dest == "":
        rp.dest = ">"
    if (err := transform_error(rp.src, rp.dest)) is not None:
        raise api_error(
            "JSStreamUpdateErrF",
            err=f"stream configuration for republish from '{rp.src}' to '{rp.dest}': {err}",
        )
