"""Direct get on a real nats-server and on a lake, compared reply by reply: ``max_bytes``,
``no_hdr``, and ``multi_last`` with ``seq``, ``up_to_seq`` and ``up_to_time`` where the stream's
last sequence is not its last live message.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jsspark.engine import directget
from jsspark.engine import headers as H
from jsspark.engine.lake import connect
from jsspark.errors import APIError
from tests.engine.matching import count_matched
from tests.engine.test_differential import Pair, pair, subj

__all__ = ["pair"]

FAR_FUTURE = "2099-01-01T00:00:00Z"

# Seqs 1-6: two messages on ``a``, a header on ``b``, and a subject whose bytes outnumber its
# characters (``ü``), as the server counts bytes.
MIXED = [
    ("a", b"xxx", None),
    ("b", b"y" * 30, [("X-K", "v")]),
    ("c", b"z", None),
    ("a", b"q" * 5, None),
    ("ü", b"u", None),
    ("e", b"e", None),
]


def _publish_mixed(pair: Pair, s: str) -> dict[int, int]:
    """Publish ``MIXED``; per seq, the bytes the server counts towards ``max_bytes``
    (subject, stored header block and payload)."""
    sent = {}
    for seq, (token, data, hdrs) in enumerate(MIXED, start=1):
        subject = subj(s, token)
        pair.publish(subject, data, headers=hdrs)
        sent[seq] = len(subject.encode()) + len(H.encode(hdrs)) + len(data)
    return sent


def _with_prefix(s: str, form: dict[str, Any]) -> dict[str, Any]:
    """``form`` with ``SUBJ`` in its subjects replaced by the stream's subject prefix."""
    prefix = subj(s, "")[:-1]

    def fix(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace("SUBJ", prefix)
        return [fix(x) for x in v] if isinstance(v, list) else v

    return {k: fix(v) for k, v in form.items()}


def assert_same_replies(pair: Pair, s: str, req: dict[str, Any]) -> None:
    """Every reply equal on both, but for ``Nats-Time-Stamp`` (the two stores' times differ)."""

    def strip(replies: list[tuple[str, dict[str, str], bytes]]) -> list[tuple[str, dict[str, str], bytes]]:
        return [
            (status, {k: v for k, v in h.items() if k != "Nats-Time-Stamp"}, d) for status, h, d in replies
        ]

    lake = strip(pair.lake.direct_get(s, req))
    # the server counts a message into its pending counts just after it acks the publish:
    # asked again, for a bounded time, while its answer differs
    deadline = time.monotonic() + 5
    server = strip(pair.server.direct_get(s, req))
    while server != lake and time.monotonic() < deadline:
        time.sleep(0.02)  # polling the server's answer, bounded by the deadline
        server = strip(pair.server.direct_get(s, req))
    assert server == lake, req


def test_max_bytes_sends_the_message_that_reaches_it(pair: Pair) -> None:
    """Each request's ``max_bytes`` is what the messages of ``seqs`` count, plus ``delta``."""
    s = pair.stream(allow_direct=True)
    counted = _publish_mixed(pair, s)
    for form, seqs, delta in [
        ({"seq": 1, "batch": 3}, (1,), 0),  # reaching the limit stops after that message
        ({"seq": 1, "batch": 3}, (1,), 1),  # crossing it: the crossing message still goes
        ({"seq": 1, "batch": 3}, (1, 2), 0),
        ({"seq": 1, "batch": 3}, (1, 2), 1),
        ({"seq": 1, "batch": 3}, (), 1),
        ({"next_by_subj": "SUBJ.a", "batch": 5}, (1,), 1),
        ({"seq": 2, "batch": 3, "no_hdr": True}, (2,), -1),  # headers count even when not sent
        ({"seq": 5, "batch": 2}, (5,), 0),  # subject bytes, not characters
        ({"multi_last": ["SUBJ.*"]}, (2,), 1),
        ({"multi_last": ["SUBJ.*"]}, (2, 3), 0),
        ({"multi_last": ["SUBJ.*"], "batch": 2}, (2, 3), 1),
    ]:
        assert_same_replies(
            pair, s, _with_prefix(s, {**form, "max_bytes": sum(counted[q] for q in seqs) + delta})
        )


def test_no_hdr_sends_no_headers(pair: Pair) -> None:
    s = pair.stream(allow_direct=True)
    _publish_mixed(pair, s)
    for form in [
        {"seq": 2, "no_hdr": True},
        {"last_by_subj": "SUBJ.b", "no_hdr": True},
        {"seq": 2, "batch": 2, "no_hdr": True},  # EOB pending is the count before the batch
        {"seq": 1, "batch": 10, "no_hdr": True},
        {"next_by_subj": "SUBJ.a", "batch": 10, "no_hdr": True},
        {"multi_last": ["SUBJ.*"], "no_hdr": True},  # multi_last ignores it: headers as usual
    ]:
        assert_same_replies(pair, s, _with_prefix(s, form))


def test_multi_last_seq_is_a_minimum(pair: Pair) -> None:
    s = pair.stream(allow_direct=True)
    _publish_mixed(pair, s)
    for form in [
        {"multi_last": ["SUBJ.*"], "seq": 3},  # last seqs below it are skipped but counted down
        {"multi_last": ["SUBJ.*"], "seq": 3, "batch": 1},
        {"multi_last": ["SUBJ.*"], "seq": 3, "max_bytes": 1},
        {"multi_last": ["SUBJ.*"], "seq": 9},  # nothing left: only the EOB
        {"multi_last": ["SUBJ.*"], "seq": 4, "up_to_seq": 3},
        {"multi_last": ["SUBJ.b"], "seq": 2},
    ]:
        assert_same_replies(pair, s, _with_prefix(s, form))


@pytest.mark.parametrize("removal", ["purge", "delete"])
def test_multi_last_bounds_after_the_tail_is_removed(pair: Pair, removal: str) -> None:
    """The stream's last seq outlives its last message: it bounds ``up_to_seq`` and is the EOB's UpTo."""
    s = pair.stream(allow_direct=True)
    for token in ("x.z", "x.y", "c"):
        pair.publish(subj(s, token), token.encode())
    if removal == "purge":
        pair.purge(s, subject=subj(s, "c"))
    else:
        pair.delete_msg(s, 3)
    pair.check(s)
    for form in [
        {"multi_last": ["SUBJ.x.>"]},
        {"multi_last": ["SUBJ.x.>"], "up_to_time": FAR_FUTURE},
        {"multi_last": ["SUBJ.x.>"], "up_to_seq": 3},  # the removed last seq itself
        {"multi_last": ["SUBJ.x.>"], "up_to_seq": 4},  # past it: No Results
        {"multi_last": ["SUBJ.>"], "up_to_seq": 2},
    ]:
        assert_same_replies(pair, s, _with_prefix(s, form))


def test_multi_last_up_to_seq_past_the_last_seq_finds_nothing(pair: Pair) -> None:
    s = pair.stream(allow_direct=True)
    pair.publish(subj(s, "x.a"), b"1")
    pair.publish(subj(s, "x.b"), b"2")
    for up_to_seq in (2, 3, 99):
        assert_same_replies(pair, s, _with_prefix(s, {"multi_last": ["SUBJ.x.*"], "up_to_seq": up_to_seq}))


@pytest.mark.parametrize(
    "req",
    [{"seq": -1}, {"next_by_subj": "SUBJ.a", "seq": -2}, {"multi_last": ["SUBJ.a"], "up_to_seq": -1},
     {"seq": 1, "batch": -1}, {"seq": 1, "batch": 2, "max_bytes": -5}],
)
def test_negative_numbers(pair: Pair, req: dict[str, Any]) -> None:
    """``seq`` and ``up_to_seq`` are uint64 on the wire: a negative one does not decode
    (408 Malformed Request); ``batch`` and ``max_bytes`` are ints and decode."""
    s = pair.stream(allow_direct=True)
    _publish_mixed(pair, s)
    assert_same_replies(pair, s, _with_prefix(s, req))


@pytest.mark.parametrize("tail", ["deleted", "purged by subject", "not stored"])
def test_the_full_wildcard_reads_the_message_at_the_last_seq(pair: Pair, tail: str) -> None:
    """nats-server reads ``>`` as the whole stream, as it reads no filter: the last message for
    ``>`` is the one at the stream's last seq (``LoadLastMsg``, ``FilteredState``'s shortcut).
    With that one gone, a get by ``>`` finds nothing, an expected last subject sequence on ``>``
    is 0, and a deliver-last consumer filtered on ``>`` starts past the stored messages, as an
    unfiltered one does. A narrower wildcard still finds the last stored match."""
    interest = tail == "not stored"
    s = pair.stream(retention="interest" if interest else "limits", allow_direct=True)
    if interest:  # nobody wants b: it takes seq 2 but is not stored
        pair.consumer_create(s, {"durable_name": "K", "ack_policy": "explicit", "filter_subject": subj(s, "a")})
    pair.publish(subj(s, "a"), b"1")
    pair.publish(subj(s, "b"), b"2")
    if tail == "deleted":
        pair.delete_msg(s, 2)
    elif tail == "purged by subject":
        pair.server.purge(s, filter=subj(s, "b"))
        pair.lake.purge(s, subject=subj(s, "b"))
    pair.state(s)
    for subject in (">", subj(s, ">")):
        pair.msg_get(s, subject=subject)
        assert_same_replies(pair, s, {"last_by_subj": subject})
    for name, filters in (("L1", {"filter_subject": ">"}), ("L2", {"filter_subjects": [">"]})):
        pair.consumer_create(s, {"durable_name": name, "ack_policy": "explicit", "deliver_policy": "last", **filters})
        pair.fetch(s, name, 5)
        pair.consumer_info(s, name)
    for expected in ("1", "0"):
        pair.publish(subj(s, "a"), b"3", headers=[("Nats-Expected-Last-Subject-Sequence", expected),
                                                 ("Nats-Expected-Last-Subject-Sequence-Subject", ">")])
    pair.check(s)


def test_request_decodes_as_go_json_unmarshal(pair: Pair) -> None:
    """``json.Unmarshal`` into ``JSApiMsgGetRequest``: unknown fields ignored, keys matched
    case-insensitively, a null left at the zero value, a later key overriding an earlier one;
    a value of the wrong Go type fails the whole request (408 Malformed Request)."""
    s = pair.stream(allow_direct=True)
    _publish_mixed(pair, s)
    for form in [
        {"seq": 1, "foo": 1},
        {"seq": 1, "no_headers": True},
        {"Seq": 2},
        {"SEQ": 2, "seq": 3},
        {"Last_By_Subj": "SUBJ.a"},
        {"seq": 1, "batch": None},
        {"seq": "1"},
        {"seq": 1.0},
        {"seq": True},
        {"seq": 1, "batch": 1.5},
        {"seq": 1, "batch": "2"},
        {"seq": 1, "no_hdr": 1},
        {"seq": 1, "no_hdr": "true"},
        {"multi_last": "SUBJ.a"},
        {"multi_last": ["SUBJ.a", 1]},
        {"last_by_subj": 5},
        {"start_time": 5},
        {"start_time": "yesterday"},
        {"seq": 1, "up_to_seq": -1},
    ]:
        assert_same_replies(pair, s, _with_prefix(s, form))


def test_a_stream_without_allow_direct_has_no_direct_get_responders(pair: Pair) -> None:
    """The server subscribes ``$JS.API.DIRECT.GET.<stream>`` only with ``allow_direct``: nats-py's
    ``get_msg(direct=True)`` fails with no responders; the message get API still answers."""
    import nats.errors

    from jsspark.engine.stream import NoRespondersError

    s = pair.stream()
    pair.publish(subj(s, "a"), b"v")
    js = pair.server.nc.jetstream()
    with pytest.raises(nats.errors.NoRespondersError):
        pair.server.loop.run_until_complete(js.get_msg(s, 1, direct=True))
    with pytest.raises(NoRespondersError, match=f"stream {s} does not answer direct gets"):
        pair.lake.lake.get_msg(s, 1, direct=True)
    with pytest.raises(NoRespondersError, match="allow_direct"):
        pair.lake.lake.direct_get(s, {"seq": 1})
    assert pair.msg_get(s, seq=1) == {"seq": 1, "subject": subj(s, "a")}


@pytest.mark.parametrize(
    "req",
    [
        {"next_by_subj": "SUBJ.e"},
        {"next_by_subj": "SUBJ.a", "seq": 2},
        {"next_by_subj": "SUBJ.a", "seq": 5},
        {"next_by_subj": "SUBJ.*", "seq": 3},
        {"next_by_subj": "SUBJ.>", "seq": 6},
        {"next_by_subj": ">", "seq": 4},
        {"next_by_subj": "SUBJ.zz"},
        {"next_by_subj": "SUBJ.*", "seq": 7},
        {"next_by_subj": "SUBJ.a", "seq": 2, "batch": 3},
    ],
)
def test_next_by_subject_across_the_index_windows(
    pair: Pair, req: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A next-by-subject get matches the index in growing windows from its start; with a first
    window of one row every answer crosses window boundaries, and is still the server's."""
    monkeypatch.setattr(directget, "NEXT_WINDOW", 1)
    s = pair.stream(allow_direct=True)
    _publish_mixed(pair, s)
    assert_same_replies(pair, s, _with_prefix(s, req))


def test_next_by_subject_reads_the_index_up_to_the_message_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A next-by-subject get matches subjects from its start until the first hit, not over the
    whole stream (it did, after every message: 55 ms at a million messages, the server 0.1 ms),
    and a literal subject with nothing at or after the start reads no subject at all."""
    lake = connect(tmp_path / "lake")
    lake.add_stream(name="N", subjects=["n.>"], allow_direct=True)
    n = 100_000
    lake.publish_batch("N", pa.table({"subject": [f"n.{i % 1000}" for i in range(n)], "data": [b"x"] * n}))
    matched = count_matched(monkeypatch, directget)
    assert lake.get_msg("N", seq=10, subject="n.*", next=True).seq == 10
    assert lake.get_msg("N", seq=10, subject="n.7", next=True).seq == 1008
    assert lake.direct_get("N", {"seq": 50_001, "next_by_subj": "n.>"}).messages[0].seq == 50_001
    assert sum(matched) <= 3 * directget.NEXT_WINDOW
    matched.clear()
    with pytest.raises(APIError):
        lake.get_msg("N", seq=n - 5, subject="n.7", next=True)  # n.7's last is 99008
    assert matched == []
    assert lake.get_msg("N", seq=99_000, subject="n.7", next=True).seq == 99_008


def test_a_batch_reads_only_the_messages_it_sends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch stops at ``max_bytes`` (64 MiB unless set) and reads only the messages up to the
    one that reaches it. It read the whole batch first: 1,000 messages of 1 MiB took 4.6 GB of
    memory and 6.7 s to send 65 of them, and 2.9 s to send one with ``max_bytes: 1000``."""
    lake = connect(tmp_path / "lake")
    lake.add_stream(name="B", subjects=["b.>"], allow_direct=True)
    n, size = 200, 10_000
    hdrs = H.to_arrow([[("K", "v" * 50)] if i % 2 else None for i in range(n)])
    lake.publish_batch("B", pa.table({"subject": [f"b.{i % 7}" for i in range(n)], "data": [b"d" * size] * n,
                                      "headers": hdrs}))
    loaded: list[int] = []
    real = directget.DirectGet._load

    def counted(self: directget.DirectGet, pin: Any, seqs: list[int], no_hdr: bool) -> Any:
        loaded.append(len(seqs))
        return real(self, pin, seqs, no_hdr)

    monkeypatch.setattr(directget.DirectGet, "_load", counted)
    reply = lake.direct_get("B", {"seq": 1, "batch": n, "max_bytes": 5 * size})
    assert [m.seq for m in reply.messages] == [1, 2, 3, 4, 5]
    assert reply.eob == {"Nats-Num-Pending": str(n - 5), "Nats-Last-Sequence": "5"}
    assert sum(loaded) == 5
    loaded.clear()
    reply = lake.direct_get("B", {"multi_last": ["b.*"], "max_bytes": 1})
    assert [m.seq for m in reply.messages] == [194] and sum(loaded) == 1
    loaded.clear()
    assert len(lake.direct_get("B", {"seq": 1, "batch": n}).messages) == n  # all under the default
    assert sum(loaded) == n


def test_multi_last_up_to_the_last_seq_reads_the_subject_stats_not_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A multi_last up to the stream's last seq (no ``up_to_seq``/``up_to_time`` before it) is
    each matching subject's last message, which the subject stats keep: it matched every
    message of the stream instead (13 ms for three keys at a million messages, growing with
    the stream). One up to an earlier seq matches the messages up to it only."""
    lake = connect(tmp_path / "lake")
    lake.add_stream(name="M", subjects=["m.>"], allow_direct=True)
    n = 50_000
    lake.publish_batch("M", pa.table({"subject": [f"m.{i % 500}" for i in range(n)], "data": [b"x"] * n}))
    matched = count_matched(monkeypatch, directget)
    reply = lake.direct_get("M", {"multi_last": ["m.1", "m.2", "m.499"]})
    assert [m.seq for m in reply.messages] == [n - 498, n - 497, n]
    assert matched == [500]
    matched.clear()
    reply = lake.direct_get("M", {"multi_last": ["m.1", "m.*"], "up_to_seq": 1000, "batch": 2})
    assert [m.seq for m in reply.messages] == [501, 502] and reply.eob["Nats-Num-Pending"] == "498"
    assert matched == [1000]
