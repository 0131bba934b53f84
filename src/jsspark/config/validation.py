"""Config validation with the server's own error codes, texts and order of checks.

``check_stream_config`` is what ``$JS.API.STREAM.CREATE`` does to one stream config on a
standalone server (``jsStreamCreateRequest``, ``checkStreamCfgLocked``, ``addStream``);
``check_consumer_config`` is what ``$JS.API.CONSUMER.CREATE`` does to one consumer config
(``setConsumerConfigDefaults``, ``checkConsumerCfg`` and the work-queue rules of
``addConsumer`` that need only the stream config). Checks that need other assets (subject
overlap between streams, work-queue filter uniqueness, limits) belong to the engine. Both
return the config as the server would store it, or raise the server's ``APIError``.
"""

from __future__ import annotations

import re
from types import ModuleType

from jsspark.config.consumer import ConsumerConfig
from jsspark.config.defaults import (
    StreamLookup,
    apply_stream_defaults,
    default_consumer_name,
    default_delete_marker_flags,
    default_duplicate_window,
    default_ephemeral_inactive_threshold,
    default_mirror_direct,
    default_placement,
    default_replicas,
    default_republish,
    default_schedule_flags,
    default_stream_limits,
    default_subjects,
    set_consumer_config_defaults,
    set_static_consumer_metadata,
    set_static_stream_metadata,
)
from jsspark.config.durations import MILLISECOND, SECOND, format_go_duration
from jsspark.config.enums import (
    AckPolicy,
    DeliverPolicy,
    DiscardPolicy,
    PersistMode,
    PriorityPolicy,
    RetentionPolicy,
    StorageType,
)
from jsspark.config.ignored import report_ignored_fields
from jsspark.config.stream import StreamConfig, StreamSource
from jsspark.errors import APIError, SubjectTransformError, api_error

MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
MAX_REPLICAS = 5
JS_API_PREFIX = "$JS.API"

_ASSET_CHARS = "'.', '*', '>', '\\', '/'"
_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")


def _subjects() -> ModuleType:
    """The subject library, imported on first use."""
    import jsspark.subjects

    return jsspark.subjects


def is_valid_asset_name(name: str) -> bool:
    """The server's ``isValidAssetName``: only the characters matter here; the length limits
    are separate checks with their own errors (stream 10052, consumer 10102), so the subject
    library's length-bounded predicate cannot be used."""
    return bool(name) and not any(c in " \t\r\n\f.*>\\/" for c in name)


def _invalid(text: str) -> APIError:
    return api_error("JSStreamInvalidConfigF", err=text)


def go_quote(s: str) -> str:
    """Go's ``%q`` (``strconv.Quote``), as used in the server's overlap texts."""
    out = ['"']
    named = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in named:
            out.append(named[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def mapping_error(src: str, dest: str) -> str | None:
    """The server's ``ValidateMapping`` (used for stream, source and mirror transforms):
    ``None`` if ``dest`` is a valid mapping of ``src`` (an empty ``dest`` is), else its text."""
    try:
        _subjects().validate_mapping(src, dest)
    except SubjectTransformError as err:
        return str(err)
    return None


def transform_error(src: str, dest: str) -> str | None:
    """The server's ``NewSubjectTransform``: ``None`` if valid, else the error text."""
    try:
        _subjects().SubjectTransform(src, dest, validate=False)
    except SubjectTransformError as err:
        return str(err)
    return None


# --- streams -----------------------------------------------------------------------------


def check_stream_config(
    cfg: StreamConfig, *, pedantic: bool = False, lookup: StreamLookup | None = None
) -> StreamConfig:
    """Validate a stream create request as a standalone server does and return the config it
    would store. ``lookup`` resolves other streams by name (origins of mirrors and sources,
    for max_msg_size, mirror_direct, external-prefix and cycle checks); without it only the
    config itself is seen. ``num_replicas`` 2-5, ``placement`` and ``storage`` are accepted
    (a standalone server refuses replicas > 1) and reported by ``report_ignored_fields``."""
    check_decodable(cfg)
    _check_create_request(cfg)
    out = cfg.model_copy(deep=True)
    set_static_stream_metadata(out)
    out = check_shared_stream_config(out, pedantic=pedantic, lookup=lookup)
    _check_source_filters(out)
    report_ignored_fields(out)
    return out


def check_shared_stream_config(
    cfg: StreamConfig, *, pedantic: bool = False, lookup: StreamLookup | None = None
) -> StreamConfig:
    """The server's ``checkStreamCfgLocked``: the checks and defaults create and update share
    (neither the create API's request checks nor ``addStream``'s filter re-checks). Returns
    a checked copy with the defaults filled in."""
    out = cfg.model_copy(deep=True)
    check_stream_identity(out)
    _check_limits(out, pedantic)
    _check_features(out, pedantic)
    stream_subjects: list[str] = []
    deliver_prefixes: list[str] = []
    api_prefixes: list[str] = []
    if out.mirror is not None:
        _check_mirror(out, pedantic, lookup, stream_subjects, deliver_prefixes, api_prefixes)
    _check_sources(out, lookup, stream_subjects, deliver_prefixes, api_prefixes)
    _check_prefixes(stream_subjects, deliver_prefixes, api_prefixes)
    _check_cycles(out, lookup)
    default_subjects(out)
    _check_subjects(out)
    _check_subject_transform(out)
    _check_republish(out, pedantic)
    default_placement(out)
    if out.placement is not None and out.placement.preferred:
        raise _invalid("preferred server not permitted in placement")
    return out


def check_decodable(cfg: StreamConfig | ConsumerConfig) -> None:
    """The server decodes create and update requests strictly (``Strict``, the default): a
    field it does not know, a misspelt one or ``consumer.server_managed`` (2.15.1), fails
    before anything else is looked at. Configs read back from a lake or a server keep them."""
    unknown = cfg.unknown_field()
    if unknown is not None:
        raise api_error("JSInvalidJSONErr", err=f'json: unknown field "{unknown}"')


def _check_create_request(cfg: StreamConfig) -> None:
    """The create API's own checks, before the config itself is looked at."""
    if "\\" in cfg.name or "/" in cfg.name:
        raise api_error("JSStreamNameContainsPathSeparatorsErr")
    if cfg.sealed:
        raise _invalid("stream configuration for create can not be sealed")
    if cfg.mirror_direct and cfg.mirror is None:
        raise _invalid("stream has no mirror but does have mirror direct")


def name_error(kind: str, name: str) -> str | None:
    """The server's text for a stream (``kind="stream"``) or consumer (``"consumer"``) name its
    config checks refuse (``checkStreamCfg``, ``checkConsumerCfg``): one that cannot be a token
    of its API's subjects (whitespace too, which the text does not say), or too long. None for
    a good one."""
    if not is_valid_asset_name(name):
        what = "stream name is required and" if kind == "stream" else "consumer name"
        return f"{what} can not contain {_ASSET_CHARS}"
    if len(name.encode()) > MAX_NAME_LEN:
        return f"{kind} name is too long, maximum allowed is {MAX_NAME_LEN}"
    return None


def check_stream_identity(cfg: StreamConfig) -> None:
    """Name, description and metadata size: the first checks of ``checkStreamCfgLocked``."""
    bad = name_error("stream", cfg.name)
    if bad is not None:
        raise _invalid(bad)
    if len(cfg.description.encode()) > MAX_DESCRIPTION_LEN:
        raise _invalid(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}")
    if sum(len(k.encode()) + len(v.encode()) for k, v in cfg.metadata.items()) > MAX_METADATA_LEN:
        raise _invalid(f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes")


def _check_limits(cfg: StreamConfig, pedantic: bool) -> None:
    default_replicas(cfg)
    if cfg.num_replicas > MAX_REPLICAS:
        raise _invalid(f"maximum replicas is {MAX_REPLICAS}")
    if cfg.num_replicas < 0:
        raise api_error("JSReplicasCountCannotBeNegative")
    default_stream_limits(cfg, pedantic)
    if cfg.max_age < 0:
        raise _invalid("max age can not be negative")
    if 0 < cfg.max_age < 100 * MILLISECOND:
        raise _invalid("max age needs to be >= 100ms")
    default_duplicate_window(cfg, pedantic)
    if cfg.duplicate_window < 0:
        raise _invalid("duplicates window can not be negative")
    if cfg.max_age != 0 and cfg.duplicate_window > cfg.max_age:
        raise _invalid("duplicates window can not be larger then max age")
    if 0 < cfg.duplicate_window < 100 * MILLISECOND:
        raise _invalid("duplicates window needs to be >= 100ms")


def _check_features(cfg: StreamConfig, pedantic: bool) -> None:
    if cfg.deny_purge and cfg.allow_rollup_hdrs:
        raise _invalid("roll-ups require the purge permission")
    if cfg.allow_msg_counter:
        if cfg.discard is DiscardPolicy.NEW:
            raise _invalid("counter stream cannot use discard new")
        if cfg.allow_msg_ttl:
            raise _invalid("counter stream cannot use message TTLs")
        if cfg.allow_msg_schedules:
            raise _invalid("counter stream cannot use message schedules")
        if cfg.retention is not RetentionPolicy.LIMITS:
            raise _invalid("counter stream can only use limits retention")
    if cfg.discard_new_per_subject:
        if cfg.discard is not DiscardPolicy.NEW:
            raise _invalid("discard new per subject requires discard new policy to be set")
        if cfg.max_msgs_per_subject <= 0:
            raise _invalid("discard new per subject requires max msgs per subject > 0")
    if cfg.subject_delete_marker_ttl > 0:
        if cfg.subject_delete_marker_ttl < SECOND:
            raise _invalid("subject delete marker TTL must be at least 1 second")
        default_delete_marker_flags(cfg, pedantic)
    elif cfg.subject_delete_marker_ttl < 0:
        raise _invalid("subject delete marker TTL must not be negative")
    if cfg.allow_msg_schedules and cfg.discard is DiscardPolicy.NEW:
        raise _invalid("message scheduling cannot use discard new")
    default_schedule_flags(cfg, pedantic)
    if cfg.persist_mode is PersistMode.ASYNC:
        if cfg.storage is not StorageType.FILE:
            raise _invalid("async persist mode is only supported on file storage")
        if cfg.num_replicas > 1:
            raise _invalid("async persist mode is not supported on replicated streams")
        if cfg.allow_atomic:
            raise _invalid("async persist mode is not supported with atomic batch publish")


def _check_durable_source(src: StreamSource, err: str) -> None:
    """The ``consumer`` block of a mirror or source: a named durable with a literal deliver
    subject, and no start or filter of its own (those belong to the consumer)."""
    c = src.consumer
    if c is None:
        return
    sj = _subjects()
    if (
        not is_valid_asset_name(c.name)
        or not sj.is_valid_publish_subject(c.deliver_subject)
        or src.opt_start_seq != 0
        or src.opt_start_time is not None
        or src.filter_subject
    ):
        raise api_error(err)


def _check_mirror(
    cfg: StreamConfig,
    pedantic: bool,
    lookup: StreamLookup | None,
    stream_subjects: list[str],
    deliver_prefixes: list[str],
    api_prefixes: list[str],
) -> None:
    mirror = cfg.mirror
    assert mirror is not None
    for cond, err in (
        (cfg.first_seq > 0, "JSMirrorWithFirstSeqErr"),
        (bool(cfg.subjects), "JSMirrorWithSubjectsErr"),
        (bool(cfg.sources), "JSMirrorWithSourcesErr"),
        (cfg.allow_msg_counter, "JSMirrorWithCountersErr"),
        (cfg.allow_atomic, "JSMirrorWithAtomicPublishErr"),
        (cfg.allow_batched, "JSMirrorWithBatchPublishErr"),
        (cfg.allow_msg_schedules, "JSMirrorWithMsgSchedulesErr"),
    ):
        if cond:
            raise api_error(err)
    _check_durable_source(mirror, "JSMirrorDurableConsumerCfgInvalid")
    if mirror.filter_subject and mirror.subject_transforms:
        raise api_error("JSMirrorMultipleFiltersNotAllowed")
    if cfg.subject_delete_marker_ttl > 0:
        raise _invalid("subject delete markers forbidden on mirrors")
    sj = _subjects()
    for i, tr in enumerate(mirror.subject_transforms):
        if tr.src and not sj.is_valid_subject(tr.src):
            raise api_error("JSMirrorInvalidSubjectFilter", err=f"invalid subject {tr.src}")
        if (err := mapping_error(tr.src, tr.dest)) is not None:
            raise api_error("JSMirrorInvalidTransformDestination", err=err)
        for j, other in enumerate(mirror.subject_transforms):
            if i != j and sj.subjects_collide(tr.src, other.src):
                raise api_error("JSMirrorOverlappingSubjectFilters")
    if mirror.external is None:
        if not is_valid_asset_name(mirror.name):
            raise api_error("JSMirrorInvalidStreamName")
        origin = lookup(mirror.name) if lookup else None
        if origin is not None:
            stream_subjects.extend(origin.subjects)
            if 0 < cfg.max_msg_size < origin.max_msg_size:
                raise api_error("JSMirrorMaxMessageSizeTooBigErr")
        default_mirror_direct(cfg, lookup, pedantic)
    else:
        _collect_prefixes(mirror, deliver_prefixes, api_prefixes)


def _collect_prefixes(src: StreamSource, deliver_prefixes: list[str], api_prefixes: list[str]) -> None:
    assert src.external is not None
    if src.external.deliver:
        deliver_prefixes.append(src.external.deliver)
    if src.external.api:
        api_prefixes.append(src.external.api)


def _source_identity(src: StreamSource) -> tuple[str, ...]:
    """What makes two sources the same (the server's ``composeIName``)."""
    if src.subject_transforms:
        filters = "\f".join(tr.src or ">" for tr in src.subject_transforms)
        dests = "\f".join(tr.dest or ">" for tr in src.subject_transforms)
    else:
        filters, dests = src.filter_subject or ">", ">"
    api = src.external.api if src.external is not None else ""
    consumer = src.consumer.name if src.consumer is not None else ""
    return (
        src.name,
        str(src.external is not None),
        api,
        str(src.consumer is not None),
        consumer,
        filters,
        dests,
    )


def _check_sources(
    cfg: StreamConfig,
    lookup: StreamLookup | None,
    stream_subjects: list[str],
    deliver_prefixes: list[str],
    api_prefixes: list[str],
) -> None:
    if cfg.sources and cfg.allow_msg_schedules:
        raise api_error("JSSourceWithMsgSchedulesErr")
    sj = _subjects()
    seen: set[tuple[str, ...]] = set()
    consumers: set[tuple[str, ...]] = set()
    for src in cfg.sources:
        if not is_valid_asset_name(src.name):
            raise api_error("JSSourceInvalidStreamName")
        ident = _source_identity(src)
        if ident in seen:
            raise api_error("JSSourceDuplicateDetected")
        seen.add(ident)
        if src.filter_subject and src.subject_transforms:
            raise api_error("JSSourceMultipleFiltersNotAllowed")
        for tr in src.subject_transforms:
            if tr.src and not sj.is_valid_subject(tr.src):
                raise api_error("JSSourceInvalidSubjectFilter", err=f"invalid subject {tr.src}")
            if (err := mapping_error(tr.src, tr.dest)) is not None:
                raise api_error("JSSourceInvalidTransformDestination", err=err)
        for i, tr in enumerate(src.subject_transforms):
            for j, other in enumerate(src.subject_transforms):
                if i != j and sj.subject_is_subset_match(tr.src, other.src):
                    raise api_error("JSSourceOverlappingSubjectFilters")
        if src.consumer is not None:
            _check_durable_source(src, "JSSourceDurableConsumerCfgInvalid")
            key = (src.name, src.external.api if src.external is not None else "", src.consumer.name)
            if key in consumers:
                raise api_error("JSSourceDurableConsumerDuplicateDetected")
            consumers.add(key)
        if src.external is None:
            origin = lookup(src.name) if lookup else None
            if origin is not None:
                stream_subjects.extend(origin.subjects)
                if 0 < cfg.max_msg_size < origin.max_msg_size:
                    raise api_error("JSSourceMaxMessageSizeTooBigErr")
        else:
            _collect_prefixes(src, deliver_prefixes, api_prefixes)


def _check_prefixes(stream_subjects: list[str], deliver_prefixes: list[str], api_prefixes: list[str]) -> None:
    sj = _subjects()
    for pfx in deliver_prefixes:
        if not sj.is_valid_publish_subject(pfx):
            raise api_error("JSStreamInvalidExternalDeliverySubjErrF", prefix=pfx)
        for sub in stream_subjects:
            if sj.subjects_collide(sub, f"{pfx}.{sub}"):
                raise api_error("JSStreamExternalDelPrefixOverlapsErrF", prefix=pfx, subject=sub)
    for pfx in api_prefixes:
        if not sj.is_valid_publish_subject(pfx):
            raise _invalid(
                f"stream external api prefix {go_quote(pfx)} must be a valid subject without wildcards"
            )
        if sj.subjects_collide(pfx, JS_API_PREFIX):
            raise api_error("JSStreamExternalApiOverlapErrF", prefix=pfx, subject=JS_API_PREFIX)


def _check_cycles(cfg: StreamConfig, lookup: StreamLookup | None) -> None:
    """Walk sources and mirrors breadth-first; meeting a visited stream again is a cycle
    (for a source, only when its filter actually overlaps that stream's subjects)."""
    sj = _subjects()

    def overlaps(subjects: list[str], flt: str) -> bool:
        return flt == "" or any(sj.subjects_collide(s, flt) for s in subjects)

    def known(name: str) -> StreamConfig | None:
        return lookup(name) if lookup else None

    to_visit = [cfg]
    visited: set[str] = set()
    while to_visit:
        cur = to_visit.pop(0)
        visited.add(cur.name)
        for src in cur.sources:
            if src.external is not None:
                continue
            if src.name in visited:
                if overlaps(cur.subjects, src.filter_subject):
                    raise _invalid("detected cycle")
            elif (nxt := known(src.name)) is not None:
                to_visit.append(nxt)
        m = cur.mirror
        if m is not None and m.external is None:
            if m.name in visited:
                raise _invalid("detected cycle")
            if (nxt := known(m.name)) is not None:
                to_visit.append(nxt)


def _check_subjects(cfg: StreamConfig) -> None:
    sj = _subjects()
    seen: set[str] = set()
    for i, subj in enumerate(cfg.subjects):
        if not sj.is_valid_subject(subj):
            raise _invalid("invalid subject")
        if subj in seen:
            raise _invalid("duplicate subjects detected")
        if subj == ">":
            if not cfg.no_ack:
                raise _invalid("capturing all subjects requires no-ack to be true")
            if cfg.num_replicas != 1:
                raise _invalid("capturing all subjects requires replicas of 1")
        if not cfg.no_ack:
            for ns in ("$JS.>", "$JSC.>", "$NRG.>"):
                if sj.subjects_collide(subj, ns) and not sj.subject_is_subset_match(subj, "$JS.EVENT.>"):
                    raise _invalid("subjects that overlap with jetstream api require no-ack to be true")
            if sj.subjects_collide(subj, "$SYS.>") and not sj.subject_is_subset_match(subj, "$SYS.ACCOUNT.>"):
                raise _invalid("subjects that overlap with system api require no-ack to be true")
        for other in cfg.subjects[i + 1 :]:
            if sj.subjects_collide(other, subj):
                raise _invalid(f"subject {go_quote(subj)} overlaps with {go_quote(other)}")
        seen.add(subj)


def _check_subject_transform(cfg: StreamConfig) -> None:
    st = cfg.subject_transform
    if st is None:
        return
    if st.src and not _subjects().is_valid_subject(st.src):
        raise api_error("JSStreamTransformInvalidSource", err=f"invalid subject {st.src}")
    if (err := mapping_error(st.src, st.dest)) is not None:
        raise api_error("JSStreamTransformInvalidDestination", err=err)


def _check_republish(cfg: StreamConfig, pedantic: bool) -> None:
    default_republish(cfg, pedantic)
    rp = cfg.republish
    if rp is None:
        return
    if any(_subjects().subjects_collide(rp.dest, subj) for subj in cfg.subjects):
        raise _invalid("stream configuration for republish destination forms a cycle")
    if transform_error(rp.src, rp.dest) is not None:
        raise _invalid(
            f"stream configuration for republish with transform from '{rp.src}' to '{rp.dest}' not valid"
        )


def _check_source_filters(cfg: StreamConfig) -> None:
    """``addStream`` re-checks plain filters (transforms were checked already); its errors
    are bare Go errors, wrapped as 10049."""
    sj = _subjects()
    if cfg.mirror is not None and not cfg.mirror.subject_transforms:
        flt = cfg.mirror.filter_subject
        if flt and not sj.is_valid_subject(flt):
            raise api_error(
                "JSStreamCreateErrF", err=f"subject filter '{flt}' for the mirror invalid subject"
            )
    for src in cfg.sources:
        if not src.subject_transforms and src.filter_subject and not sj.is_valid_subject(src.filter_subject):
            raise api_error(
                "JSStreamCreateErrF",
                err=f"subject filter '{src.filter_subject}' for the source: invalid subject",
            )


# --- consumers ---------------------------------------------------------------------------


def check_consumer_config(
    cfg: ConsumerConfig, stream_cfg: StreamConfig, *, pedantic: bool = False
) -> ConsumerConfig:
    """Validate a consumer create request against its stream's config as a standalone server
    does and return the config it would store. Rules that need the stream's other consumers
    (work-queue uniqueness, max_consumers) are left to the caller."""
    check_decodable(cfg)
    stream = apply_stream_defaults(stream_cfg)
    for name in (cfg.durable_name, cfg.name):
        if "\\" in name or "/" in name:
            raise api_error("JSConsumerNameContainsPathSeparatorsErr")
    out = cfg.model_copy(deep=True)
    default_consumer_name(out)
    set_static_consumer_metadata(out)
    set_consumer_config_defaults(out, stream, pedantic)
    _check_consumer_identity(out, stream)
    _check_acks(out)
    _check_delivery(out, stream)
    _check_filters(out)
    _check_start(out)
    _check_misc(out, stream)
    if stream.retention is RetentionPolicy.WORK_QUEUE and not out.direct and not out.sourcing:
        if out.ack_policy not in (AckPolicy.EXPLICIT, AckPolicy.FLOW_CONTROL):
            raise api_error("JSConsumerWQRequiresExplicitAckErr")
        if out.deliver_policy is not DeliverPolicy.ALL:
            raise api_error("JSConsumerWQConsumerNotDeliverAllErr")
    if out.is_durable and len(out.durable_name.encode()) > MAX_NAME_LEN:
        raise api_error("JSConsumerNameTooLongErrF", max=MAX_NAME_LEN)
    default_ephemeral_inactive_threshold(out)
    return out


def _check_consumer_identity(cfg: ConsumerConfig, stream: StreamConfig) -> None:
    if cfg.name and not is_valid_asset_name(cfg.name):
        raise _invalid(f"consumer name can not contain {_ASSET_CHARS}")
    if cfg.durable_name and not is_valid_asset_name(cfg.durable_name):
        raise _invalid(f"consumer durable name can not contain {_ASSET_CHARS}")
    if cfg.num_replicas > 0 and cfg.num_replicas > stream.num_replicas:
        raise api_error("JSConsumerReplicasExceedsStream")
    if cfg.num_replicas < 0:
        raise api_error("JSReplicasCountCannotBeNegative")
    if (
        stream.retention in (RetentionPolicy.INTEREST, RetentionPolicy.WORK_QUEUE)
        and cfg.num_replicas != 0
        and cfg.num_replicas != stream.num_replicas
    ):
        raise api_error("JSConsumerReplicasShouldMatchStream")


def _check_acks(cfg: ConsumerConfig) -> None:
    if any(b < 0 for b in cfg.backoff):
        raise api_error("JSConsumerBackOffNegativeErr")
    if cfg.ack_wait < 0:
        raise api_error("JSConsumerAckWaitNegativeErr")
    if cfg.ack_policy is AckPolicy.FLOW_CONTROL:
        if not cfg.deliver_subject:
            raise api_error("JSConsumerAckFCRequiresPushErr")
        if not cfg.flow_control:
            raise api_error("JSConsumerAckFCRequiresFCErr")
        if cfg.idle_heartbeat != SECOND:
            raise _invalid("flow control ack policy heartbeat needs to be 1s")
        if cfg.max_ack_pending <= 0:
            raise api_error("JSConsumerAckFCRequiresMaxAckPendingErr")
        if cfg.ack_wait != 0 or cfg.backoff:
            raise api_error("JSConsumerAckFCRequiresNoAckWaitErr")
        if cfg.max_deliver > 0:
            raise api_error("JSConsumerAckFCRequiresNoMaxDeliverErr")
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise api_error("JSConsumerMaxDeliverBackoffErr")
    if len(cfg.description.encode()) > MAX_DESCRIPTION_LEN:
        raise api_error("JSConsumerDescriptionTooLongErrF", max=MAX_DESCRIPTION_LEN)


def _check_delivery(cfg: ConsumerConfig, stream: StreamConfig) -> None:
    sj = _subjects()
    if cfg.deliver_subject:
        ds = cfg.deliver_subject
        if not sj.is_literal(ds):
            raise api_error("JSConsumerDeliverToWildcardsErr")
        if not sj.is_valid_subject(ds):
            raise api_error("JSConsumerInvalidDeliverSubject")
        if any(sj.subject_is_subset_match(ds, subj) for subj in stream.subjects):
            raise api_error("JSConsumerDeliverCycleErr")
        if cfg.max_waiting != 0:
            raise api_error("JSConsumerPushMaxWaitingErr")
        if cfg.max_ack_pending > 0 and cfg.ack_policy is AckPolicy.NONE:
            raise api_error("JSConsumerMaxPendingAckPolicyRequiredErr")
        if 0 < cfg.idle_heartbeat < 100 * MILLISECOND:
            raise api_error("JSConsumerSmallHeartbeatErr")
    else:
        if cfg.ack_policy is AckPolicy.NONE and stream.retention is RetentionPolicy.WORK_QUEUE:
            raise api_error("JSConsumerPullRequiresAckErr")
        if cfg.rate_limit_bps > 0:
            raise api_error("JSConsumerPullWithRateLimitErr")
        if cfg.max_waiting < 0:
            raise api_error("JSConsumerMaxWaitingNegativeErr")
        if cfg.idle_heartbeat > 0:
            raise api_error("JSConsumerHBRequiresPushErr")
        if cfg.flow_control:
            raise api_error("JSConsumerFCRequiresPushErr")
        if cfg.max_batch < 0:
            raise api_error("JSConsumerMaxRequestBatchNegativeErr")
        if cfg.max_expires != 0 and cfg.max_expires < MILLISECOND:
            raise api_error("JSConsumerMaxRequestExpiresTooSmall")
    limits = stream.consumer_limits
    if 0 < limits.max_ack_pending < cfg.max_ack_pending:
        raise api_error("JSConsumerMaxPendingAckExcessErrF", limit=limits.max_ack_pending)
    if 0 < limits.inactive_threshold < cfg.inactive_threshold:
        raise api_error(
            "JSConsumerInactiveThresholdExcess", limit=format_go_duration(limits.inactive_threshold)
        )
    if cfg.direct:
        if not cfg.deliver_subject:
            raise api_error("JSConsumerDirectRequiresPushErr")
        if cfg.is_durable:
            raise api_error("JSConsumerDirectRequiresEphemeralErr")


def _check_filters(cfg: ConsumerConfig) -> None:
    sj = _subjects()
    if cfg.filter_subject and cfg.filter_subjects:
        raise api_error("JSConsumerDuplicateFilterSubjects")
    if cfg.filter_subject and not sj.is_valid_subject(cfg.filter_subject):
        raise _invalid("invalid subject")
    if any(f == "" for f in cfg.filter_subjects):
        raise api_error("JSConsumerEmptyFilter")
    filters = cfg.filter_subjects or ([cfg.filter_subject] if cfg.filter_subject else [])
    for i, flt in enumerate(filters):
        if not sj.is_valid_subject(flt):
            raise _invalid("invalid subject")
        for j, other in enumerate(filters):
            if i != j and sj.subject_is_subset_match(flt, other):
                raise api_error("JSConsumerOverlappingSubjectFilters")


_POLICY_TEXT = {
    DeliverPolicy.ALL: "all",
    DeliverPolicy.LAST: "last",
    DeliverPolicy.LAST_PER_SUBJECT: "last per subject",
    DeliverPolicy.NEW: "new",
    DeliverPolicy.BY_START_SEQUENCE: "by start sequence",
    DeliverPolicy.BY_START_TIME: "by start time",
}


def _check_start(cfg: ConsumerConfig) -> None:
    """Deliver policy against ``opt_start_seq`` / ``opt_start_time`` (10094)."""
    dp = _POLICY_TEXT[cfg.deliver_policy]

    def bad_start(start: str) -> APIError:
        return api_error(
            "JSConsumerInvalidPolicyErrF",
            err=f"consumer delivery policy is deliver {dp}, but optional start {start} is also set",
        )

    def not_set(what: str) -> APIError:
        return api_error(
            "JSConsumerInvalidPolicyErrF",
            err=f"consumer delivery policy is deliver {dp}, but optional {what} is not set",
        )

    has_seq, has_time = cfg.opt_start_seq > 0, cfg.opt_start_time is not None
    if cfg.deliver_policy is DeliverPolicy.BY_START_SEQUENCE:
        if not has_seq:
            raise not_set("start sequence")
        if has_time:
            raise bad_start("time")
    elif cfg.deliver_policy is DeliverPolicy.BY_START_TIME:
        if not has_time:
            raise not_set("start time")
        if has_seq:
            raise bad_start("start sequence")
    else:
        if has_seq:
            raise bad_start("sequence")
        if has_time:
            raise bad_start("time")
        if cfg.deliver_policy is DeliverPolicy.LAST_PER_SUBJECT and not (
            cfg.filter_subject or cfg.filter_subjects
        ):
            raise not_set("filter subject")


_INT64 = re.compile(r"[+-]?[0-9]+")


def _sampling_error(freq: str) -> str | None:
    """Go's ``strconv.Atoi`` on the frequency sans ``%``: its error text, ``"<nil>"`` for a
    negative number (the server reports a nil error), ``None`` when fine."""
    s = freq.removesuffix("%")
    if not _INT64.fullmatch(s):
        return f"strconv.Atoi: parsing {go_quote(s)}: invalid syntax"
    n = int(s)
    if not -(2**63) <= n < 2**63:
        return f"strconv.Atoi: parsing {go_quote(s)}: value out of range"
    return "<nil>" if n < 0 else None


def _check_misc(cfg: ConsumerConfig, stream: StreamConfig) -> None:
    if cfg.sample_freq and (err := _sampling_error(cfg.sample_freq)) is not None:
        raise api_error("JSConsumerInvalidSamplingErrF", err=err)
    if cfg.flow_control and cfg.idle_heartbeat == 0:
        raise api_error("JSConsumerWithFlowControlNeedsHeartbeats")
    if cfg.durable_name and cfg.name and cfg.name != cfg.durable_name:
        raise api_error("JSConsumerCreateDurableAndNameMismatch")
    if sum(len(k.encode()) + len(v.encode()) for k, v in cfg.metadata.items()) > MAX_METADATA_LEN:
        raise api_error("JSConsumerMetadataLengthErrF", limit=f"{MAX_METADATA_LEN // 1024}KB")
    if cfg.priority_policy is not PriorityPolicy.NONE:
        if cfg.deliver_subject:
            raise api_error("JSConsumerPushWithPriorityGroupErr")
        if not cfg.priority_groups:
            raise api_error("JSConsumerPriorityPolicyWithoutGroup")
        for group in cfg.priority_groups:
            if group == "":
                raise api_error("JSConsumerEmptyGroupName")
            if not _GROUP_NAME.fullmatch(group):
                raise api_error("JSConsumerInvalidGroupNameErr")
    else:
        if cfg.priority_groups:
            raise api_error("JSConsumerPriorityGroupWithPolicyNone")
        if cfg.priority_timeout > 0:
            raise api_error("JSConsumerPinnedTTLWithoutPriorityPolicyNone")
    if stream.placement is not None and stream.placement.preferred:
        raise _invalid("preferred server not permitted in placement")
