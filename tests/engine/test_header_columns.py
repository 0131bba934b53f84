"""Header columns handled a column at a time (``engine.headers``: ``decode_column``,
``without_column``, ``append_headers``; ``Origin.headers_column``) give exactly what their
one-message forms give, which stay the reference: the live source takes every delivery's
header block through ``decode_column``, and a source landing stamps and cleans every
message's headers through the others."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jsspark.datasource.schema import HEADERS_ARROW
from jsspark.engine import headers as H
from jsspark.engine.sourcing import Origin
from jsspark.live.spill import _header_cells, header_cells

# the bytes a header line is made of, the separators and what surrounds them among them
LINE_TEXT = st.text(alphabet=["K", "v", "-", ":", " ", "\r", "\n", "\t", "é", "😀"], max_size=12)


@st.composite
def blocks(draw: st.DrawFn) -> bytes | None:
    kind = draw(st.sampled_from(["null", "empty", "block", "block", "block"]))
    if kind == "null":
        return None
    if kind == "empty":
        return b""
    status = draw(st.sampled_from(["", " 503", " 100 Idle Heartbeat", "x"]))
    lines = draw(st.lists(LINE_TEXT, max_size=5))
    end = draw(st.sampled_from(["\r\n\r\n", "\r\n", ""]))
    return ("NATS/1.0" + status + "".join("\r\n" + line for line in lines) + end).encode()


def one_at_a_time(values: list[bytes | None]) -> list[object]:
    return [_header_cells(v) for v in values]


@settings(max_examples=300, deadline=None)
@given(st.lists(blocks(), min_size=1, max_size=12), st.integers(0, 3), st.integers(0, 3))
def test_decode_column_reads_every_block_as_decode_does(values: list[bytes | None], head: int, tail: int) -> None:
    """Any lines, CR or LF alone inside them, colons and spaces anywhere, blocks with or without
    their closing CRLFs next to each other in one buffer, null and empty cells, and a slice of
    the column (a run cut out of a read)."""
    whole = pa.array([b"NATS/1.0\r\nPad: x\r\n\r\n"] * head + values + [b"NATS/1.0\r\n\r\n"] * tail, pa.binary())
    column = whole.slice(head, len(values))
    got = H.decode_column(column, HEADERS_ARROW)
    got.validate(full=True)
    assert got.type == HEADERS_ARROW
    assert got.to_pylist() == one_at_a_time(values)


def test_decode_column_examples() -> None:
    values = [b"NATS/1.0\r\nNats-Msg-Id: a1\r\n\r\n", None, b"", b"NATS/1.0 503\r\n\r\n",
              b"NATS/1.0\r\nK:   v w \r\nK:2\r\nno colon\r\nX: a:b\r\n\r\n", "NATS/1.0\r\nK: é\r\n".encode()]
    assert H.decode_column(pa.array(values, pa.binary())).to_pylist() == [
        [{"name": "Nats-Msg-Id", "value": "a1"}], None, None, None,
        [{"name": "K", "value": "v w "}, {"name": "K", "value": "2"}, {"name": "X", "value": "a:b"}],
        [{"name": "K", "value": "é"}],
    ]


@pytest.mark.parametrize("block", [b"K: v\r\n\r\n", b"NATS/1.", b"NATS/1.0\r\nK: \xff\xfe\r\n\r\n"])
def test_a_block_decode_would_refuse_or_repair_is_left_to_it(block: bytes) -> None:
    """Not ``NATS/1.0`` (decode refuses it; the live source repairs it message by message) or not
    UTF-8 (decode replaces what it cannot read): ``NotVectorized``, and ``header_cells`` gives
    what one block at a time gives."""
    column = pa.array([b"NATS/1.0\r\nA: 1\r\n\r\n", block], pa.binary())
    with pytest.raises(H.NotVectorized):
        H.decode_column(column)
    if block.startswith(b"NATS/1.0"):
        assert header_cells(column).to_pylist() == one_at_a_time(column.to_pylist())
        assert header_cells(column).to_pylist()[1] == [{"name": "K", "value": "\ufffd\ufffd"}]
    else:
        with pytest.raises(ValueError, match="not a NATS header block"):
            header_cells(column)


def test_from_column_reads_binary_blocks_as_normalize_does() -> None:
    blocks_ = [b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n", None, b"NATS/1.0\r\n\r\n"]
    assert H.from_column(pa.array(blocks_, pa.binary())).to_pylist() == H.to_arrow(
        [H.normalize(b) for b in blocks_]).to_pylist()
    with pytest.raises(ValueError, match="column 'headers' of type binary cannot be read as message headers"):
        H.from_column(pa.array([b"A: 1\r\n\r\n"], pa.binary()))


def test_from_column_reads_a_sliced_map_column_row_by_row() -> None:
    """A map column of a sliced table (``table.slice``) holds its entries from an offset into the
    keys and items: each row's headers are its own, not the first rows' of the unsliced column."""
    maps = pa.array([[("K", "a")], [("K", "b"), ("L", "b2")], None, [], [("K", "d")]], pa.map_(pa.string(), pa.string()))
    for lo, n in ((1, 4), (2, 3), (3, 2), (4, 1)):
        part = maps.slice(lo, n)
        got = [H.from_arrow(cell) for cell in H.from_column(part).to_pylist()]
        assert got == [list(m) or None if m is not None else None for m in part.to_pylist()], (lo, n)


PAIRS = st.lists(st.tuples(st.sampled_from(["Nats-Stream-Source", "Nats-Expected-Stream", "Nats-Batch-Id", "Nats-Msg-Id",
                                            "Nats-Expected", "nats-expected-stream", "K"]),
                           st.sampled_from(["", "v", " x"])), max_size=4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), PAIRS), min_size=1, max_size=10), st.booleans())
def test_without_column_keeps_what_without_keeps(rows: list[list[tuple[str, str]] | None], drop_source: bool) -> None:
    column = H.to_arrow([r or None for r in rows]) if any(rows) else pa.array([[] if r == [] else None for r in rows],
                                                                               H.HEADER_TYPE)
    drop = (H.STREAM_SOURCE,) if drop_source else ()
    got = H.without_column(column.slice(0), drop=drop, drop_prefixes=H.ORIGIN_CHECK_PREFIXES)
    got.validate(full=True)
    want = [H.without(r, drop=drop, drop_prefixes=H.ORIGIN_CHECK_PREFIXES) for r in rows]
    assert [H.from_arrow(c) for c in got.to_pylist()] == want


def test_append_headers_puts_each_rows_values_after_its_pairs() -> None:
    column = H.to_arrow([[("A", "1")], None, [("B", "2"), ("C", "3")]])
    got = H.append_headers(column, ["X", "Y"], [pa.array(["x0", "x1", "x2"]), pa.array(["y0", "y1", "y2"])])
    assert [H.from_arrow(c) for c in got.to_pylist()] == [
        [("A", "1"), ("X", "x0"), ("Y", "y0")], [("X", "x1"), ("Y", "y1")],
        [("B", "2"), ("C", "3"), ("X", "x2"), ("Y", "y2")]]


@pytest.mark.parametrize("origin", [
    Origin(name="O"), Origin(name="O", filter_subject="o.a"),
    Origin.of({"name": "O", "subject_transforms": [{"src": "o.a", "dest": "s.a"}, {"src": "o.b", "dest": ""}]}),
])
@pytest.mark.parametrize("identity", [None, "2HwfT34c"])
def test_headers_column_is_header_of_each_row(origin: Origin, identity: str | None) -> None:
    seqs, subjects = [1, 22, 2**63 - 1], ["o.a", "o.b", "o.é"]
    got = origin.headers_column(pa.array(seqs, pa.int64()), pa.array(subjects), identity)
    assert got.to_pylist() == [origin.header(s, subj, identity) for s, subj in zip(seqs, subjects, strict=True)]


VALUES = st.sampled_from(["", "v", " x", "a\r\nb", "\n", "é"])
SET_PAIRS = st.lists(st.tuples(st.sampled_from(["Nats-Msg-Id", "K", "nats-msg-id"]), VALUES), max_size=4)


def _column(rows: list[list[tuple[str, str]] | None]) -> pa.Array:
    if any(rows):
        return H.to_arrow([r or None for r in rows])
    return pa.array([[] if r == [] else None for r in rows], H.HEADER_TYPE)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), SET_PAIRS), st.one_of(st.none(), VALUES)), min_size=1, max_size=10),
       st.integers(0, 2), st.booleans())
def test_set_column_sets_as_the_one_row_forms_do(rows: list[tuple[list[tuple[str, str]] | None, str | None]],
                                                 head: int, keep_later: bool) -> None:
    """``set_column`` against the live sink's one-row ``_set`` (the first pair of the key takes
    the value in its place, later ones go, a row without one gets it last) and, with
    ``keep_later``, republish's ``with_msg_id`` (later ones stay); a null value leaves the row
    alone. Sliced columns too (a Spark batch can be a slice)."""
    from jsspark.jobs.republish import with_msg_id
    from jsspark.live.publisher import _set

    pairs = [r for r, _ in rows]
    values = [v for _, v in rows]
    column = _column([[("X", "pad")]] * head + pairs).slice(head)
    got = H.set_column(column, H.MSG_ID, pa.array(values, pa.string()), keep_later=keep_later)
    got.validate(full=True)
    want = []
    for row, value in zip(pairs, values, strict=True):
        row = list(row or [])
        if value is not None and keep_later:
            row = with_msg_id(row, value)
        elif value is not None:
            _set(row, H.MSG_ID, value)
        want.append(row or None)
    assert [H.from_arrow(c) for c in got.to_pylist()] == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), SET_PAIRS), min_size=1, max_size=10), st.integers(0, 2), st.booleans())
def test_encode_column_is_encode_of_each_row(rows: list[list[tuple[str, str]] | None], head: int,
                                             newlines: bool) -> None:
    """``encode_column`` against ``encode`` (and, with ``newlines_to_spaces``, CR/LF made spaces as
    the sink's one-row ``HeaderBlock`` makes them); a row without pairs has no block."""
    column = _column([[("X", "pad")]] * head + rows).slice(head)
    got = H.encode_column(column, newlines_to_spaces=newlines)
    got.validate(full=True)
    table = str.maketrans({"\r": " ", "\n": " "})
    assert got.to_pylist() == [
        H.encode([(k, v.translate(table) if newlines else v) for k, v in r]) if r else None for r in rows]


def test_encode_column_takes_a_null_value_as_empty() -> None:
    column = pa.array([[{"name": "K", "value": None}, {"name": "A", "value": "1"}]], H.HEADER_TYPE)
    assert H.encode_column(column).to_pylist() == [b"NATS/1.0\r\nK: \r\nA: 1\r\n\r\n"]
