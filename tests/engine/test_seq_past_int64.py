"""Sequences are Go ``uint64``s on the server; a lake's seq column is int64. A bound in
``[2**63, 2**64)`` is past every stored seq (compared as such, never cast), and ``2**64`` or
more fails to decode as on the server (10025 for API requests, 408 for a direct get). A state
a lake cannot store (a next seq past 2**63 - 1) is refused with an error naming the seq.
"""

from __future__ import annotations

import pytest

import jsspark
from jsspark.errors import JSSparkError, UnsupportedConfigError
from tests.engine.test_differential import Pair, pair, subj

__all__ = ["pair"]


def test_bounds_past_int64_are_past_every_seq(pair: Pair) -> None:
    s = pair.stream(allow_direct=True)
    for token in ("a", "b", "a"):
        pair.publish(subj(s, token), b"v")
    for req in [
        {"next_by_subj": subj(s, "a"), "seq": 2**63},
        {"seq": 2**63},
        {"seq": 2**64 - 1, "batch": 2},
        {"multi_last": [subj(s, "a")], "seq": 2**63},
        {"seq": 2**64},
        {"multi_last": [subj(s, "a")], "seq": 2**64},
        {"seq": 1, "up_to_seq": 2**64},
    ]:
        assert pair.direct_get(s, req), req
    pair.msg_get(s, seq=2**63)
    pair.delete_msg(s, 2**63)
    for big in (2**64, 2**70):
        pair.msg_get(s, seq=big)
        pair.delete_msg(s, big)
        pair.purge(s, subject=subj(s, "a"), keep=big)
        pair.purge(s, seq=big)
    pair.purge(s, subject=subj(s, "b"), seq=2**63)  # every message on the filter
    pair.check(s)


def test_a_next_seq_past_int64_is_refused(tmp_path) -> None:
    """The server takes ``purge(seq=2**63)`` (first_seq 2**63, last_seq 2**63 - 1) and a
    ``first_seq`` of 2**63; a lake's next message could not be stored, so both are refused."""
    lake = jsspark.connect(str(tmp_path / "lake"))
    lake.add_stream(name="S", subjects=["s.>"])
    lake.publish("s.a", b"v")
    with pytest.raises(JSSparkError, match="9223372036854775808"):
        lake.purge("S", seq=2**63)
    assert lake.stream_info("S").state.messages == 1  # nothing removed
    with pytest.raises(UnsupportedConfigError, match="first_seq 9223372036854775808"):
        lake.add_stream(name="T", subjects=["t.>"], first_seq=2**63)
    with pytest.raises(Exception, match="stream not found"):
        lake.stream_info("T")


def test_a_publish_past_the_last_int64_seq_is_refused_by_name(tmp_path) -> None:
    """A stream at the last int64 sequence stores its last message there; one more (alone, or
    in a batch that would cross it) is refused naming the bound, with nothing stored (it was a
    bare OverflowError from numpy)."""
    import pyarrow as pa

    lake = jsspark.connect(str(tmp_path / "lake"))
    lake.add_stream(name="S", subjects=["s.>"], first_seq=2**63 - 2)
    assert lake.publish("s.a", b"1").seq == 2**63 - 2
    with pytest.raises(JSSparkError, match=r"would pass 9223372036854775807.*nothing stored"):
        lake.publish_batch("S", pa.table({"subject": ["s.a", "s.b"], "data": [b"2", b"3"]}))
    assert lake.publish("s.a", b"2").seq == 2**63 - 1
    with pytest.raises(JSSparkError, match="after sequence 9223372036854775807 would pass"):
        lake.publish("s.a", b"3")
    state = lake.stream_info("S").state
    assert (state.messages, state.last_seq) == (2, 2**63 - 1)
