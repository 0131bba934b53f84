"""Per-message TTLs (``Nats-TTL``): when each message of a stream that allows them expires.

A stream with ``allow_msg_ttl`` removes a message ``ttl`` seconds after it was stored, and
``max_age`` never removes one whose TTL is ``never`` (the file store's hash wheel and
``expireMsgs``). The TTL lives in the message's headers, which the index does not hold, so
such a stream keeps this sparse table beside its index: the seqs that carry a TTL and when
each expires (``NEVER`` for ``never``), read from the headers when the index is loaded and
kept in step with the stream's own commits.

With ``subject_delete_marker_ttl`` the message that expires last on its subject is replaced
by a marker (``Nats-Marker-Reason: MaxAge``, a TTL of its own, ``Nats-Rollup: sub``), so a
reader sees that the subject's value is gone rather than nothing.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jsspark.config.durations import SECOND
from jsspark.engine import headers as H
from jsspark.engine.header_rules import message_ttl

NEVER = -1
MARKER_REASON = "Nats-Marker-Reason"
KV_OPERATION = "KV-Operation"


class Expiries:
    """The seqs (ascending) with a TTL and, for each, its expiry in ns since the epoch (or
    ``NEVER``), as of the index ``version``."""

    def __init__(self, seqs: np.ndarray, expires: np.ndarray, version: int) -> None:
        self.seqs, self.expires, self.version = seqs, expires, version

    @classmethod
    def of(cls, rows: pa.Table, version: int) -> Expiries:
        """From stored rows (``seq``, ``ts_ns``, ``headers``)."""
        seqs, expires = _ttls(rows)
        order = np.argsort(seqs, kind="stable")
        return cls(seqs[order], expires[order], version)

    def added(self, rows: pa.Table, version: int) -> None:
        seqs, expires = _ttls(rows)
        if len(seqs):
            self.seqs = np.concatenate([self.seqs, seqs])
            self.expires = np.concatenate([self.expires, expires])
            order = np.argsort(self.seqs, kind="stable")
            self.seqs, self.expires = self.seqs[order], self.expires[order]
        self.version = version

    def removed(self, seqs: np.ndarray, version: int) -> None:
        if len(seqs) and len(self.seqs):
            keep = ~np.isin(self.seqs, seqs)
            self.seqs, self.expires = self.seqs[keep], self.expires[keep]
        self.version = version

    def over(self, seqs: np.ndarray) -> np.ndarray:
        """Per seq of ``seqs`` (ascending: an index's): its expiry (0: no TTL, ``NEVER``: exempt
        from ``max_age``). The few TTL seqs are looked up among ``seqs``, not the other way
        round: a publish on a stream of millions of messages calls this each time."""
        out = np.zeros(len(seqs), dtype=np.int64)
        if len(self.seqs) and len(seqs):
            pos = np.minimum(np.searchsorted(seqs, self.seqs), len(seqs) - 1)
            hit = seqs[pos] == self.seqs
            out[pos[hit]] = self.expires[hit]
        return out

    def exemptions(self) -> Expiries:
        """Only the ``never`` TTLs (``max_age`` exemptions), for a stream without TTLs."""
        never = self.expires == NEVER
        return Expiries(self.seqs[never], self.expires[never], self.version)

    def due(self, now_ns: int) -> bool:
        """Whether any message with a TTL has expired by ``now_ns``."""
        return bool(((self.expires > 0) & (self.expires <= now_ns)).any())


def expires_of(rows: pa.Table) -> np.ndarray:
    """Per row of ``rows`` (``ts_ns``, ``headers``): its expiry as ``Expiries.over`` gives it."""
    out = np.zeros(rows.num_rows, dtype=np.int64)
    if rows.num_rows:
        seqs, expires = _ttls(rows.append_column("_row", pa.array(np.arange(rows.num_rows))), key="_row")
        out[seqs] = expires
    return out


def _ttls(rows: pa.Table, key: str = "seq") -> tuple[np.ndarray, np.ndarray]:
    """The ``key`` values of the rows with a TTL, and their expiries."""
    values = H.column_lookup(rows["headers"], H.TTL)
    if values.null_count == len(values):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    has = pc.is_valid(values)
    texts = values.filter(has).to_pylist()
    ttls = {t: message_ttl(t) for t in set(texts)}
    secs = np.fromiter((ttls[t] or 0 for t in texts), np.int64, len(texts))
    keys = rows[key].filter(has).to_numpy()
    ts = rows["ts_ns"].filter(has).to_numpy().astype(np.int64)
    # the store's ``time.Duration(ts) + time.Second*time.Duration(ttl)``: int64 arithmetic
    # that wraps (numpy's does too, on arrays); an expiry wrapped to 0 or below is long past,
    # due at once, as the hash wheel removes it at its next check
    with np.errstate(over="ignore"):
        at = ts + secs * np.int64(SECOND)
    expires = np.where(secs < 0, NEVER, np.maximum(at, 1))
    real = secs != 0
    return np.asarray(keys[real], np.int64), expires[real]


def is_marker(pairs: H.HeaderPairs | None) -> bool:
    """A subject delete marker, or a KV purge (``isSubjectDeleteMarker``): its expiry places
    no new marker."""
    return H.get(pairs, MARKER_REASON) is not None or H.get(pairs, KV_OPERATION) == "PURGE"


def marker_headers(ttl_ns: int) -> H.HeaderPairs:
    """The headers of the marker the server stores when a subject's last message expires."""
    return [(MARKER_REASON, "MaxAge"), (H.TTL, go_duration(ttl_ns // SECOND)), (H.ROLLUP, "sub")]


def go_duration(seconds: int) -> str:
    """Go's ``time.Duration.String`` of whole seconds: ``1s``, ``1m0s``, ``1h0m0s``."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"
