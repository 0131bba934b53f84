"""Direct get on a lake stream: the server's ``$JS.API.DIRECT.GET`` request forms and replies.

Which messages answer a request is decided on the in-memory index (sequence, subject, time);
only those rows are then read from the Delta table, with the ``seq`` predicate pruning files
and row groups. Errors are the server's status replies (``DirectGetError``: 404 Message Not
Found, 408 Bad Request, ...), replies carry the server's headers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from jsspark.config.timestamps import UTCTime
from jsspark.engine import headers as H
from jsspark.engine.api import RawStreamMsg, rfc3339nano
from jsspark.engine.arrays import take_rows
from jsspark.engine.index import MessageIndex
from jsspark.engine.schema import MAX_SEQ, stored_size
from jsspark.engine.stream import LakeStream
from jsspark.engine.table import Snapshot
from jsspark.errors import DirectGetError, JSSparkError, api_error
from jsspark.subjects import is_literal, match_filter

MAX_MULTI_RESULTS = 1024
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # the server's max_pending default
NEXT_WINDOW = 4096  # index rows a next-by-subject get matches first (then 4x as many each time)

# JSApiMsgGetRequest's fields and their Go types (jetstream_api.go).
_UINT64, _INT, _STRING, _STRINGS, _TIME, _BOOL = "uint64", "int", "string", "[]string", "*time.Time", "bool"
_FIELDS = {
    "seq": _UINT64, "last_by_subj": _STRING, "next_by_subj": _STRING, "batch": _INT, "max_bytes": _INT,
    "start_time": _TIME, "multi_last": _STRINGS, "up_to_seq": _UINT64, "up_to_time": _TIME, "no_hdr": _BOOL,
}  # fmt: skip
_FOLDED = {k.casefold(): k for k in _FIELDS}


def _decodes_as(kind: str, value: Any) -> bool:
    """Whether Go's decoder puts ``value`` into a field of Go type ``kind`` (a JSON number with
    a fraction or out of range fails an integer; a string fails a number; a number a bool)."""
    if kind in (_UINT64, _INT):
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        return 0 <= value < 2**64 if kind == _UINT64 else -(2**63) <= value < 2**63
    if kind == _STRING:
        return isinstance(value, str)
    if kind == _STRINGS:
        return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
    if kind == _BOOL:
        return isinstance(value, bool)
    if isinstance(value, datetime):  # *time.Time: a Python caller's time, as JSON's RFC3339 string
        return True
    if not isinstance(value, str):
        return False
    try:
        UTCTime.parse(value)
    except ValueError:
        return False
    return True


def decode_request(req: dict[str, Any]) -> dict[str, Any]:
    """A direct-get request as ``json.Unmarshal`` into ``JSApiMsgGetRequest`` reads it: keys
    matched case-insensitively (an exact match first), fields it does not know ignored, a null
    left at the zero value, a later key overriding an earlier one; a value of the wrong type is
    the server's ``408 Malformed Request`` (processDirectGetRequest)."""
    out: dict[str, Any] = {}
    for key, value in req.items():
        name = key if key in _FIELDS else _FOLDED.get(str(key).casefold())
        if name is None or value is None:
            continue
        if not _decodes_as(_FIELDS[name], value):
            raise DirectGetError(408, "Malformed Request")
        out[name] = value
    return out


Pin = tuple[Snapshot, MessageIndex]  # a table version and the index built on it
_READ_ATTEMPTS = 5


class _Stale(Exception):
    """The pinned version's rows could not be read (its files vacuumed): answer again."""


@dataclass
class DirectReply:
    """Messages in reply order, and for batch/multi requests the headers of the 204 EOB."""

    messages: list[RawStreamMsg]
    eob: dict[str, str] | None = None
    reply_headers: list[dict[str, str]] = field(default_factory=list)


def _time_ns(value: Any) -> int:
    """Nanoseconds since the epoch of a datetime or an RFC3339(Nano) string, exactly."""
    t = value if isinstance(value, datetime) else UTCTime.parse(str(value))
    micros = (t - _EPOCH) // timedelta(microseconds=1)
    return micros * 1000 + getattr(t, "nanosecond", 0)


class DirectGet:
    def __init__(self, stream: LakeStream) -> None:
        self.stream = stream

    # -- nats-py get_msg -----------------------------------------------------------------------
    def get_msg(self, seq: int | None = None, subject: str | None = None, next: bool = False) -> RawStreamMsg:
        req: dict[str, Any] = {}
        if seq is not None:
            req["seq"] = seq
        if subject is not None:
            req["next_by_subj" if next else "last_by_subj"] = subject
        try:
            reply = self.request(req)
        except DirectGetError as e:
            if e.status == 404:
                raise api_error("JSNoMessageFoundErr") from None
            raise
        return reply.messages[0]

    # -- the full request ----------------------------------------------------------------------
    def request(self, req: dict[str, Any] | None) -> DirectReply:
        if not req:
            raise DirectGetError(408, "Empty Request")
        req = decode_request(req)
        seq = req.get("seq", 0)
        last = req.get("last_by_subj", "")
        nxt = req.get("next_by_subj", "")
        batch = req.get("batch", 0)
        multi = list(req.get("multi_last", []))
        start_time = req.get("start_time")
        up_to_seq = req.get("up_to_seq", 0)
        up_to_time = req.get("up_to_time")
        if not (seq or last or nxt or multi or start_time):
            raise DirectGetError(408, "Empty Request")
        conflicts = [
            seq and last, seq and start_time, start_time and last, last and nxt, last and batch,
            last and multi, nxt and multi, up_to_seq and up_to_time,
        ]
        if any(conflicts):
            raise DirectGetError(408, "Bad Request")
        no_hdr = req.get("no_hdr", False)
        max_bytes = req.get("max_bytes", 0)
        # The server answers under the stream's read lock (getDirectRequest): from one state,
        # never an error for a concurrent write. Here that state is one pinned table version:
        # the selection and the read of its rows. Only when that version's files are gone
        # (vacuumed underneath) is the request answered again on the newest version.
        stale: _Stale | None = None
        for _ in range(_READ_ATTEMPTS):
            try:
                return self._answer(self.stream._load(), seq, last, nxt, batch, multi, start_time, up_to_seq,
                                    up_to_time, no_hdr, max_bytes)
            except _Stale as e:
                stale = e
        raise JSSparkError(
            f"stream {self.stream.name}: direct get {req!r} found its messages' files gone "
            f"{_READ_ATTEMPTS} times (vacuumed while being read)"
        ) from stale

    def _answer(
        self, pin: Pin, seq: int, last: str, nxt: str, batch: int, multi: list[str], start_time: Any,
        up_to_seq: int, up_to_time: Any, no_hdr: bool, max_bytes: int,
    ) -> DirectReply:
        # The stream's last seq comes with the version: it outlives its last message (a
        # delete or purge of the tail keeps it).
        snap, index = pin
        if multi:  # the server's multi-last reply ignores no_hdr
            return self._multi(pin, multi, seq, batch, up_to_seq, up_to_time, max_bytes)
        if start_time:
            seq = self._seq_from_time(index, _time_ns(start_time), snap.last_seq)
        if batch:  # a negative batch is a batch too: it sends nothing but the end of batch
            return self._batch(pin, seq or 1, nxt or ">", batch, max_bytes, no_hdr)
        if last:
            found = self._last_by(index, last, snap.last_seq)
        elif nxt:
            found = self._next_by(index, nxt, seq or 1)
        else:
            found = seq if index.has(seq) else 0
        if not found:
            raise DirectGetError(404, "Message Not Found")
        msg = self._load(pin, [found], no_hdr)[0]
        return DirectReply([msg], None, [{} if no_hdr else self._headers(msg)])

    # -- selection on the index ----------------------------------------------------------------
    @staticmethod
    def _seq_from_time(index: MessageIndex, ts: int, last_seq: int) -> int:
        """First seq with time >= ts; past the end, the stream's ``last_seq`` + 1, live or not
        (as ``GetSeqFromTime``)."""
        rows = index.rows
        hit = rows["seq"].filter(pc.greater_equal(rows["ts_ns"], ts))
        return int(hit[0].as_py()) if len(hit) else last_seq + 1

    @staticmethod
    def _last_by(index: MessageIndex, subject: str, last_seq: int) -> int:
        """From the per-subject stats: O(1) for a literal subject, O(distinct subjects) for a
        wildcard. ``>`` is the message at the stream's last seq, if stored (``LoadLastMsg``)."""
        if subject == ">":
            return last_seq if index.has(last_seq) else 0
        if is_literal(subject):
            return index.last_seq_of(subject)
        stats = index.subject_stats()
        hit = stats["last_seq"].filter(match_filter(stats["subject"], subject))
        return int(pc.max(hit).as_py()) if len(hit) else 0

    @staticmethod
    def _from(index: MessageIndex, subject: str, start: int) -> pa.Table:
        """The rows on ``subject`` at or after ``start``, a uint64: past ``MAX_SEQ``, none."""
        if start > MAX_SEQ:
            return index.rows.slice(0, 0)
        rows = index.rows.slice(int(np.searchsorted(index.seq_array(), start)))
        return rows if subject == ">" else rows.filter(match_filter(rows["subject"], subject))

    @staticmethod
    def _next_by(index: MessageIndex, subject: str, start: int) -> int:
        """The first seq on ``subject`` at or after ``start``: matched over growing windows of
        the index from ``start``, so the cost follows the distance to that message, not the
        stream (a literal subject with nothing at or after ``start`` is decided by its stats)."""
        if start > MAX_SEQ or (is_literal(subject) and index.last_seq_of(subject) < start):
            return 0
        rows = index.rows
        lo, window = int(np.searchsorted(index.seq_array(), start)), NEXT_WINDOW
        while lo < rows.num_rows:
            part = rows.slice(lo, window)
            seqs = part["seq"] if subject == ">" else part["seq"].filter(match_filter(part["subject"], subject))
            if len(seqs):
                return int(seqs[0].as_py())
            lo, window = lo + window, window * 4
        return 0

    def _batch(self, pin: Pin, start: int, subject: str, batch: int, max_bytes: int,
               no_hdr: bool) -> DirectReply:
        hit = self._from(pin[1], subject, start)
        total = hit.num_rows
        if batch < 0:
            return DirectReply([], {"Nats-Num-Pending": str(total), "Nats-Last-Sequence": "0"}, [])
        if not total:
            raise DirectGetError(404, "Message Not Found")
        reply = self._emit(pin, hit["seq"].to_numpy()[:batch], total, max_bytes, no_hdr)
        prev = reply.messages[-1].seq if reply.messages else 0
        # Without headers the server never counts pending down (its np-- is in the header branch).
        pending = total if no_hdr else total - len(reply.messages)
        reply.eob = {"Nats-Num-Pending": str(pending), "Nats-Last-Sequence": str(prev)}
        return reply

    def _multi(
        self,
        pin: Pin,
        subjects: list[str],
        min_seq: int,
        batch: int,
        up_to_seq: int,
        up_to_time: Any,
        max_bytes: int,
    ) -> DirectReply:
        """Each subject's last message up to ``up_to_seq``/``up_to_time`` (default: the stream's
        ``last_seq``), those below ``min_seq`` skipped."""
        last_seq, index = pin[0].last_seq, pin[1]
        if up_to_seq > last_seq:  # the file store finds no block holding it
            raise DirectGetError(404, "No Results")
        upto = up_to_seq or last_seq
        if up_to_time:  # the last seq before that time; 0 means nothing qualifies
            upto = self._seq_from_time(index, _time_ns(up_to_time), last_seq) - 1
        if upto >= last_seq:  # each subject's last message: from the per-subject stats
            stats = index.subject_stats()
            seqs = np.sort(stats["last_seq"].filter(match_filter(stats["subject"], subjects)).to_numpy())
        else:
            rows = index.rows.slice(0, int(np.searchsorted(index.seq_array(), upto, side="right")))
            hit = rows.filter(match_filter(rows["subject"], subjects))
            seqs = np.sort(hit.group_by("subject", use_threads=False).aggregate([("seq", "max")])["seq_max"].to_numpy())
        if not len(seqs):
            raise DirectGetError(404, "No Results")
        if len(seqs) > MAX_MULTI_RESULTS:
            raise DirectGetError(413, "Too Many Results")
        # Skipped seqs still count down pending, as in the server's MultiLastMsgs.
        seqs = seqs[np.searchsorted(seqs, min_seq) if min_seq <= MAX_SEQ else len(seqs) :]
        reply = self._emit(pin, seqs[:batch] if batch > 0 else seqs, len(seqs), max_bytes, no_hdr=False)
        reply.eob = {
            "Nats-Num-Pending": str(len(seqs) - len(reply.messages)),
            "Nats-Last-Sequence": str(reply.messages[-1].seq if reply.messages else 0),
            "Nats-UpTo-Sequence": str(upto),
        }
        return reply

    def _emit(self, pin: Pin, seqs: np.ndarray, total: int, max_bytes: int, no_hdr: bool) -> DirectReply:
        """Load ``seqs`` and stamp each with the batch headers (none with ``no_hdr``); ``total`` is
        how many are pending before the first. Stops after the message that brings the bytes to
        ``max_bytes``, counted as the server does: subject, stored headers (sent or not), payload."""
        limit = max_bytes or DEFAULT_MAX_BYTES
        reply = DirectReply([], None, [])
        sent_bytes, prev, i = 0, 0, 0
        # Only the messages up to the one that reaches the limit are read: each sends at least
        # its stored size less the store's overhead and a header block's 4 bytes (stored_size).
        index = pin[1]
        sizes = take_rows(index.rows.select(["size"]), index.positions_of(np.asarray(seqs, np.int64)))["size"]
        at_least = np.maximum(sizes.to_numpy() - (stored_size("", 0, 0) + 4), 0)
        while i < len(seqs):
            upto = i + int(np.searchsorted(np.cumsum(at_least[i:]), limit - sent_bytes)) + 1
            for m in self._load(pin, list(seqs[i:upto]), no_hdr=False):
                if no_hdr:
                    reply.messages.append(replace(m, header_pairs=None))
                    reply.reply_headers.append({})
                else:
                    h = self._headers(m)
                    h["Nats-Num-Pending"] = str(total - i - 1)
                    h["Nats-Last-Sequence"] = str(prev)
                    reply.messages.append(m)
                    reply.reply_headers.append(h)
                prev, i = m.seq, i + 1
                sent_bytes += len(m.subject.encode()) + H.encoded_len(m.header_pairs) + len(m.data)
                if sent_bytes >= limit:
                    return reply
        return reply

    # -- loading -------------------------------------------------------------------------------
    def _load(self, pin: Pin, seqs: list[int], no_hdr: bool) -> list[RawStreamMsg]:
        """The rows of ``seqs`` from the pinned version the index that chose them was built on."""
        if not seqs:
            return []
        snap, index = pin
        cols = ["seq", "ts_ns", "subject", "data"] + ([] if no_hdr else ["headers"])
        flt = ds.field("seq") == int(seqs[0]) if len(seqs) == 1 else ds.field("seq").isin([int(s) for s in seqs])
        # The index knows each message's subject, so its partition: prune to those files.
        pos = index.positions_of(np.asarray(seqs, dtype=np.int64))
        subjects = index.rows["subject"].take(pa.array(pos[pos >= 0]))
        parts = pc.unique(self.stream.partition.of(subjects)).to_pylist()
        flt = flt & (ds.field("part") == parts[0] if len(parts) == 1 else ds.field("part").isin(parts))
        try:
            table = self.stream.table.read(snap, filter=flt, columns=cols).sort_by("seq")
        except FileNotFoundError as e:  # a vacuum removed this version's files
            raise _Stale from e
        if table.num_rows != len(seqs):  # not the version the index was built on
            raise _Stale
        name = self.stream.name
        out = []
        for r in table.to_pylist():
            out.append(
                RawStreamMsg(
                    subject=r["subject"], seq=r["seq"], data=r["data"] or b"", stream=name, ts_ns=r["ts_ns"],
                    header_pairs=None if no_hdr else H.from_arrow(r["headers"]),
                )
            )
        return out

    def _headers(self, m: RawStreamMsg) -> dict[str, str]:
        return {
            "Nats-Stream": self.stream.name,
            "Nats-Subject": m.subject,
            "Nats-Sequence": str(m.seq),
            "Nats-Time-Stamp": rfc3339nano(m.ts_ns),
        }
