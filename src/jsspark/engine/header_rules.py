"""The server's publish-header rules that read no stream state, in its order.

``processJetStreamMsg`` checks a message's headers one rule after another and answers with
the first one broken; the stream engine runs these between the rules that read the stream
(expected sequences, dedup, the last msg id). A lake stream has no message counters,
schedules or atomic batches, so it refuses their headers as a server stream that does not
enable them does.
"""

from __future__ import annotations

import re

from jsspark.config.durations import SECOND, parse_go_duration
from jsspark.config.validation import go_quote
from jsspark.engine import headers as H
from jsspark.engine.rollups import ALL, SUBJECT
from jsspark.errors import api_error
from jsspark.subjects.tokens import is_valid_publish_subject

_BIG_INT = re.compile(r"[+-]?[0-9]+")  # Go's big.Int SetString(s, 10)
_UINT = re.compile(r"[0-9]+")  # the server's parseInt64: ASCII digits only



_U64 = (1 << 64) - 1


def parse_int64(text: str) -> int:
    """The server's ``parseInt64`` (util.go): ASCII digits accumulated in an ``int64`` with no
    overflow check, so a longer number wraps (``2^64+1`` is 1, ``2^63`` is ``-2^63``); -1 for
    anything else. A decimal number modulo ``2^64`` is that of its last 64 digits (``10^64``
    is a multiple of ``2^64``), so no digit count limit applies."""
    if not _UINT.fullmatch(text):
        return -1
    n = int(text[-64:]) & _U64
    return n - (1 << 64) if n >> 63 else n


def parse_seq(text: str) -> int:
    """An expected sequence as the server reads it: ``uint64(parseInt64(v))``, so a value that
    is not ASCII digits is ``2^64-1`` (matches no sequence) and a longer number wraps."""
    return parse_int64(text) & _U64


def message_ttl(text: str | None) -> int | None:
    """``Nats-TTL`` in seconds as the server reads it (``parseMessageTTL``): -1 for ``never``,
    0 for none, ``None`` for a value it refuses (under a second, or neither a Go duration
    nor a number of seconds ``parseInt64`` reads as non-negative: one past ``int64`` wraps,
    ``2^64+1`` is 1 and ``2^63`` negative, refused). A duration's seconds are Go's
    ``int64(dur.Seconds())``, a float64 sum."""
    if text is None:
        return 0
    text = text.lstrip(" ")  # as ``sliceHeader`` reads a value; any other whitespace is refused
    if not text:
        return 0
    if text.lower() == "never":
        return -1
    try:
        ns = parse_go_duration(text, exact=True)
    except ValueError:
        secs = parse_int64(text)
        return secs if secs >= 0 else None
    return int(float(ns // SECOND) + float(ns % SECOND) / 1e9) if ns >= SECOND else None


def check_before_expectations(hdrs: H.HeaderPairs, stream: str, allow_msg_ttl: bool) -> None:
    """Atomic batch, counter increment, expected stream and a TTL where TTLs are off: the
    rules the server applies before the expected sequences, in its order."""
    if H.get(hdrs, H.BATCH_ID) is not None:
        raise api_error("JSAtomicPublishDisabledErr")
    incr = H.get(hdrs, H.INCR)
    if incr is not None:
        raise api_error("JSMessageIncrDisabledErr" if _BIG_INT.fullmatch(incr) else "JSMessageIncrInvalidErr")
    expected = H.get(hdrs, H.EXPECTED_STREAM)
    if expected is not None and expected != stream:
        raise api_error("JSStreamNotMatchErr")
    if not allow_msg_ttl and message_ttl(H.get(hdrs, H.TTL)) not in (0, None):
        raise api_error("JSMessageTTLDisabledErr")


def _present(hdrs: H.HeaderPairs, key: str) -> str | None:
    """The first ``key``'s value (leading spaces skipped) even when empty, as ``sliceHeader``
    tells a header sent empty (``""``) from one not sent (``None``)."""
    for k, v in hdrs or ():
        if k == key:
            return v.lstrip(" ")
    return None


# Where Go's ``time.LoadLocation`` looks for a zone on Linux (``platformZoneSources``); the
# server embeds no tz database (it does not import ``time/tzdata``).
_GO_ZONE_DIRS = ("/usr/share/zoneinfo/", "/usr/share/lib/zoneinfo/", "/usr/lib/locale/TZ/", "/etc/zoneinfo/")


def go_loads_zone(name: str) -> bool:
    """Whether Go's ``time.LoadLocation(name)`` succeeds: ``""``, ``UTC`` and ``Local``
    always; a name with ``..`` or starting with a slash never; else a TZif file of that name
    under one of its zone directories (the name taken as a path, as Go opens it)."""
    if name in ("", "UTC", "Local"):
        return True
    if ".." in name or name[0] in "/\\" or "\0" in name:
        return False
    for root in _GO_ZONE_DIRS:
        try:
            with open(root + name, "rb") as f:
                if f.read(4) == b"TZif":
                    return True
        except OSError:
            continue
    return False


def check_schedules(hdrs: H.HeaderPairs, subject: str) -> None:
    """The schedule headers, after the expected sequences: a ``Nats-Schedule-Time-Zone``
    sent empty or naming no zone Go can load, or any schedule, is refused (10188: the
    server's ``getMessageSchedule`` error, reported as schedules being off), and
    ``Nats-Schedule-Next``/``Nats-Scheduler`` not forming a schedule purge are invalid
    (10212) before that."""
    zone = _present(hdrs, H.SCHEDULE_TIME_ZONE)
    if zone is not None and (not zone or not go_loads_zone(zone)):
        raise api_error("JSMessageSchedulesDisabledErr")
    if H.get(hdrs, H.SCHEDULE) is not None:
        raise api_error("JSMessageSchedulesDisabledErr")
    scheduler = H.get(hdrs, H.SCHEDULER)
    if H.get(hdrs, H.SCHEDULE_NEXT) is not None:
        if H.get(hdrs, H.SCHEDULE_NEXT) != "purge" or scheduler in (None, subject) or not is_valid_publish_subject(
            scheduler
        ):
            raise api_error("JSMessageSchedulesSchedulerInvalidErr")
        raise api_error("JSMessageSchedulesDisabledErr")
    if scheduler is not None:
        raise api_error("JSMessageSchedulesSchedulerInvalidErr")


def rollup_of(hdrs: H.HeaderPairs, allowed: bool) -> str | None:
    """The message's rollup (``sub``/``all``, case-insensitive), checked after dedup and the
    last msg id: refused unless the stream allows rollups and purges (10111)."""
    value = H.get(hdrs, H.ROLLUP)
    if value is None:
        return None
    if not allowed:
        raise api_error("JSStreamRollupFailedF", err="rollup not permitted")
    value = value.lower()
    if value not in (SUBJECT, ALL):
        raise api_error("JSStreamRollupFailedF", err=f"rollup value invalid: {go_quote(value)}")
    return value


def check_ttl(hdrs: H.HeaderPairs) -> None:
    """A TTL the server cannot read is refused last, after every other rule (10165)."""
    if message_ttl(H.get(hdrs, H.TTL)) is None:
        raise api_error("JSMessageTTLInvalidErr")


def raised_ttl(hdrs: H.HeaderPairs, marker_ttl_ns: int, max_per_subject: int) -> H.HeaderPairs | None:
    """The headers as stored when subject delete markers are on and the message's TTL is
    shorter than theirs: the server raises it to the marker TTL (whole seconds, the header
    moved to the end) so a marker is never missed; ``max_msgs_per_subject`` 1 is exempt.
    None: stored as published."""
    if marker_ttl_ns <= 0 or max_per_subject == 1:
        return None
    ttl, least = message_ttl(H.get(hdrs, H.TTL)), marker_ttl_ns // SECOND
    if ttl is None or ttl <= 0 or ttl >= least:
        return None
    return [*(H.without(hdrs, [H.TTL]) or []), (H.TTL, str(least))]
