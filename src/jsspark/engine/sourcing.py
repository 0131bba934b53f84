"""What a mirror or a source is, seen from the stream that stores its messages.

A ``StreamSource`` (a stream config's ``mirror`` or one of its ``sources``) decides which origin
messages are taken (``filter_subject`` or the transforms' sources), what subject they are
stored under (the first transform that matches, ``subject_transforms``), and, for a source, the
``Nats-Stream-Source`` header the server writes. All of that is the server's, in
``stream.go``: ``StreamSource.composeIName``, ``sourceInfo.genSourceHeader``,
``processInboundSourceMsg`` / ``processInboundMirrorMsg`` and ``stream.identity``.

Progress per origin is kept as Delta ``txn`` actions in the target's own commits (app ids
``jsspark.source.<iname>``, ``.lag.``, ``.seen.``, ``.ident.``): written atomically with the messages,
carried by every later commit and checkpoint of the table, and readable without a scan. This
is the lake's counterpart of the server's persisted per-source state (``store.SourcesState``):
it survives purges and expiry and says where a restarted source resumes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from jsspark.subjects.transform import SubjectTransform
from jsspark.subjects.vectorized import match_filter

_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
FWC = ">"
SEQ_APP = "jsspark.source."
LAG_APP = "jsspark.source-lag."
SEEN_APP = "jsspark.source-seen."
IDENT_APP = "jsspark.source-ident."
STORED_APP = "jsspark.source-stored."


def server_hash(text: str, size: int = 8) -> str:
    """The server's ``getHash``: sha256, each of the first ``size`` bytes mod 62 as a digit."""
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(_DIGITS[b % 62] for b in digest[:size])


def identity_of(created_rfc3339: str) -> str:
    """``stream.identity``: the hash of the origin's creation time (RFC3339Nano, UTC), which
    2.15 appends to ``Nats-Stream-Source`` so a recreated origin is noticed."""
    return server_hash(created_rfc3339)


def identity_number(identity: str) -> int:
    """An origin identity as a Delta ``txn`` version (a non-negative 56-bit number): the
    lake's counterpart of the ``Ident`` the server keeps next to each source's ``Seq``."""
    return int.from_bytes(hashlib.sha256(identity.encode()).digest()[:7], "big")


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if isinstance(cfg, dict):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


@dataclass(frozen=True)
class Origin:
    """The parts of a ``StreamSource`` that decide how its messages are stored."""

    name: str
    filter_subject: str = ""
    transforms: tuple[tuple[str, str], ...] = ()
    external_api: str = ""
    consumer_name: str = ""
    opt_start_seq: int = 0
    opt_start_time: str | None = None

    @classmethod
    def of(cls, source: Any) -> Origin:
        """From a ``StreamSource`` model, its JSON dict, or a bare origin stream name."""
        if isinstance(source, Origin):
            return source
        if isinstance(source, str):
            return cls(name=source)
        trs = tuple((_get(t, "src", "") or "", _get(t, "dest", "") or "") for t in _get(source, "subject_transforms") or ())
        external = _get(source, "external")
        consumer = _get(source, "consumer")
        start_time = _get(source, "opt_start_time")
        if start_time is not None and not isinstance(start_time, str):
            start_time = start_time.to_rfc3339nano() if hasattr(start_time, "to_rfc3339nano") else str(start_time)
        return cls(
            name=_get(source, "name", ""),
            filter_subject=_get(source, "filter_subject", "") or "",
            transforms=trs,
            external_api=(_get(external, "api", "") or "") if external is not None else "",
            consumer_name=(_get(consumer, "name", "") or "") if consumer is not None else "",
            opt_start_seq=int(_get(source, "opt_start_seq", 0) or 0),
            opt_start_time=start_time,
        )

    # -- naming ---------------------------------------------------------------------------------
    @property
    def iname(self) -> str:
        """``composeIName``: ``<name[:apiHash][:C=consumerHash]> <filters> <dests>``; filters and
        dests joined by form feed when there are transforms, ``>`` standing for empty."""
        head = self.name
        if self.external_api:
            head += ":" + server_hash(self.external_api)
        if self.consumer_name:
            head += ":C=" + server_hash(self.consumer_name)
        if not self.transforms:
            return f"{head} {self.filter_subject or FWC} {FWC}"
        srcs = "\f".join(s or FWC for s, _ in self.transforms)
        dests = "\f".join(d or FWC for _, d in self.transforms)
        return f"{head} {srcs} {dests}"

    def header(self, seq: int, subject: str, identity: str | None = None) -> str:
        """``genSourceHeader``: ``<iname head> <seq> <filters> <dests> <original subject>[ <identity>]``."""
        head, filters, dests = self.iname.split(" ")
        text = f"{head} {seq} {filters} {dests} {subject}"
        return f"{text} {identity}" if identity else text

    def headers_column(self, seqs: pa.Array, subjects: pa.Array, identity: str | None) -> pa.Array:
        """``header`` for each row (origin seqs and original subjects), as a string column."""
        head, filters, dests = self.iname.split(" ")
        parts = [pa.scalar(head), seqs.cast(pa.string()), pa.scalar(filters), pa.scalar(dests), subjects.cast(pa.string())]
        if identity:
            parts.append(pa.scalar(identity))
        return pc.binary_join_element_wise(*parts, " ")

    # -- selecting and mapping ------------------------------------------------------------------
    def filters(self) -> list[str]:
        """The consumer filters the server asks the origin for: the transforms' sources, else
        ``filter_subject``; empty means every subject."""
        if self.transforms:
            return [s or FWC for s, _ in self.transforms]
        return [self.filter_subject] if self.filter_subject else []

    def selected(self, subjects: pa.Array) -> pa.Array:
        """Which origin messages this origin takes (the consumer's filter, re-checked here so
        rows from a wider reader are never stored)."""
        filters = self.filters()
        if not filters or FWC in filters:
            return pa.array([True] * len(subjects), pa.bool_())
        return pc.fill_null(match_filter(subjects, filters), False)

    def map_subjects(self, subjects: pa.Array) -> pa.Array:
        """The stored subjects: the first transform (with a destination) that matches wins,
        as ``processInboundSourceMsg`` loops; a transform with an empty destination is no
        transform at all and is skipped, as the server's ``nil`` entry is."""
        original = subjects.cast(pa.string())
        out = original
        done = pa.array([False] * len(out), pa.bool_())
        for src, dest in self.transforms:
            if not dest:
                continue
            mapped = SubjectTransform(src or FWC, dest).apply_array(original, keep_unmatched=False)
            hit = pc.and_(pc.invert(done), pc.is_valid(mapped))
            out = pc.if_else(hit, mapped, out)
            done = pc.or_(done, hit)
        return out

    # -- progress --------------------------------------------------------------------------------
    @property
    def seq_app(self) -> str:
        return SEQ_APP + self.iname

    @property
    def lag_app(self) -> str:
        return LAG_APP + self.iname

    @property
    def seen_app(self) -> str:
        return SEEN_APP + self.iname

    @property
    def ident_app(self) -> str:
        return IDENT_APP + self.iname

    @property
    def stored_app(self) -> str:
        """The last origin sequence the target stored (the info's ``seq``), kept apart from the
        mark only once they differ: a message skipped (no interest, a duplicate) moves the mark."""
        return STORED_APP + self.iname
