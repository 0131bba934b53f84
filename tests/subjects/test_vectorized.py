"""The Arrow paths must equal the scalar functions row for row (including nulls, chunking,
dictionary and large_string inputs, and byte-level cuts through multi-byte characters)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st
from subjects_vectors import MATCH, MATCHES

from jsspark.errors import SubjectError, SubjectTransformError
from jsspark.subjects import SubjectTransform, fnv1a_32, fnv1a_32_array, match_filter, subject_matches
from jsspark.subjects.tokens import is_sendable_subject
from jsspark.subjects.vectorized import check_sendable_subjects

TOKENS = ["a", "b", "ab", "a-b", "--b", "abcdef", "*", ">", "*x", ">x", "é", "xé-", "", "$y"]
subject_st = st.one_of(st.none(), st.lists(st.sampled_from(TOKENS), min_size=1, max_size=5).map(".".join))
subjects_st = st.lists(subject_st, max_size=30)
filter_st = st.lists(st.sampled_from(["a", "b", "ab", "*", "*x", ">x", "é", ">"]), min_size=1, max_size=4).map(".".join)
SETTINGS = settings(max_examples=int(__import__("os").environ.get("HYPO_N", "200")), deadline=None)


def layouts(values: list[str | None]) -> list[pa.Array | pa.ChunkedArray]:
    """The same column as a plain array, a sliced array, chunks, a dictionary and large_string."""
    arr = pa.array(values, pa.string())
    padded = pa.array(["pad", *values], pa.string()).slice(1)
    half = len(values) // 2
    chunked = pa.chunked_array([arr.slice(0, half), arr.slice(half)], pa.string())
    return [arr, padded, chunked, arr.dictionary_encode(), arr.cast(pa.large_string())]


def as_bytes(values: list[str | None]) -> list[bytes | None]:
    return [None if v is None else v.encode("utf-8", "surrogateescape") for v in values]


def column_bytes(result: pa.Array | pa.ChunkedArray) -> list[bytes | None]:
    if isinstance(result, pa.ChunkedArray):
        result = result.combine_chunks()
    if pa.types.is_dictionary(result.type):
        result = result.cast(result.type.value_type)
    binary = pa.large_binary() if pa.types.is_large_string(result.type) else pa.binary()
    return result.view(binary).to_pylist()


def column_list(result: pa.Array | pa.ChunkedArray) -> list[object]:
    return result.to_pylist()


@SETTINGS
@given(subjects=subjects_st, filters=st.lists(filter_st, min_size=1, max_size=4))
def test_match_filter_equals_scalar(subjects: list[str | None], filters: list[str]) -> None:
    expected = [s is not None and any(subject_matches(f, s) for f in filters) for s in subjects]
    for column in layouts(subjects):
        assert column_list(match_filter(column, filters)) == expected
    assert column_list(match_filter(pa.array(subjects, pa.string()), filters[0])) == [
        s is not None and subject_matches(filters[0], s) for s in subjects]


def test_match_filter_vectors() -> None:
    subjects = [s for s, _, _ in MATCHES]
    for _, f, _ in MATCHES:
        got = column_list(match_filter(pa.array(subjects), f))
        assert got == [subject_matches(f, s) for s in subjects], f
    assert column_list(match_filter(pa.array(["a", None]), [])) == [False, False]
    assert column_list(match_filter(pa.array(["a..b"]), ["a..b"])) == [False]


@st.composite
def transforms(draw: st.DrawFn) -> SubjectTransform:
    src = ".".join(draw(st.lists(st.sampled_from(["a", "*", "*", "*x", "b"]), min_size=1, max_size=3)))
    fwc = draw(st.booleans())
    if fwc:
        src += ".>"
    i = st.integers(-1, 3)
    n = st.integers(-2, 7)
    token = st.one_of(
        st.sampled_from(["p", "$1", "$2", "$0"]),
        st.builds("{{{{wildcard({})}}}}".format, i),
        st.builds("{{{{partition({})}}}}".format, n),
        st.builds("{{{{partition({},{},{})}}}}".format, n, i, i),
        st.builds("{{{{split({},{})}}}}".format, i, st.sampled_from(["-", "b", ""])),
        st.builds("{{{{{}({},{})}}}}".format, st.sampled_from(
            ["splitFromLeft", "splitFromRight", "sliceFromLeft", "sliceFromRight", "left", "right"]), i, n),
    )
    dest = draw(st.lists(token, min_size=1, max_size=4))
    if fwc:
        dest.append(">")
    try:
        return SubjectTransform(src, ".".join(dest))
    except SubjectTransformError:
        reject()
        raise


@SETTINGS
@given(tr=transforms(), subjects=subjects_st, keep=st.booleans())
def test_apply_array_equals_scalar(tr: SubjectTransform, subjects: list[str | None], keep: bool) -> None:
    expected_match = [s is not None and tr.matches(s) for s in subjects]
    expected = [None if s is None else tr.apply_or_keep(s) if keep or tr.matches(s) else None for s in subjects]
    for column in layouts(subjects):
        assert column_list(tr.matches_array(column)) == expected_match
        assert column_bytes(tr.apply_array(column, keep_unmatched=keep)) == as_bytes(expected)


@pytest.mark.parametrize(("src", "dest", "subject", "expected"), [m for m in MATCH if "random" not in m[1]])
def test_apply_array_vectors(src: str, dest: str, subject: str, expected: str) -> None:
    tr = SubjectTransform(src, dest)
    out = tr.apply_array(pa.array([subject, None, "zz.zz.zz.zz.zz.zz.zz"]), keep_unmatched=False).to_pylist()
    assert out[:2] == [expected, None]
    assert out[2] == (tr.apply("zz.zz.zz.zz.zz.zz.zz") if tr.matches("zz.zz.zz.zz.zz.zz.zz") else None)


def test_cuts_through_characters_are_valid_text() -> None:
    """A cut through a multi-byte character comes back as the scalar function gives it (the
    server's JSON view, U+FFFD per byte that is not UTF-8), in every layout, and the column
    is valid UTF-8 (before, ``e2 82`` was stored as is and no read could decode it)."""
    tr = SubjectTransform("*", "{{left(1,2)}}.{{right(1,1)}}.{{splitFromRight(1,1)}}.{{sliceFromLeft(1,2)}}")
    subjects = ["é", "€x", "ok", None, "a€é"]
    expected = [None if s is None else tr.apply_or_keep(s) for s in subjects]
    assert expected[1] == "\ufffd\ufffd.x.€.x.\ufffd\ufffd.\ufffdx"
    for column in layouts(subjects):
        out = tr.apply_array(column)
        (out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out).validate(full=True)
        assert column_bytes(out) == as_bytes(expected)


def test_random_array_in_range_per_row() -> None:
    tr = SubjectTransform("*.*", "r.{{random(5)}}.$2")
    column = pa.array(["a.b"] * 500 + ["x", None])
    out = tr.apply_array(column).to_pylist()
    assert set(out[:500]) <= {f"r.{i}.b" for i in range(5)} and len(set(out[:500])) > 1
    assert out[500:] == ["x", None]
    dict_out = tr.apply_array(column.dictionary_encode()).to_pylist()
    assert len(set(dict_out[:500])) > 1  # drawn per row, not per distinct value


def test_identity_and_filter_only_arrays() -> None:
    column = pa.array(["a..b", None, "a.b"])
    assert SubjectTransform(">", ">").apply_array(column).to_pylist() == ["a..b", None, "a.b"]
    assert SubjectTransform(">", ">").matches_array(column).to_pylist() == [True, False, True]
    only = SubjectTransform("a.*", "")
    assert only.apply_array(column, keep_unmatched=False).to_pylist() == [None, None, "a.b"]


@SETTINGS
@given(values=st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=40))
def test_fnv_array_equals_scalar(values: list[bytes | None]) -> None:
    expected = [None if v is None else fnv1a_32(v) for v in values]
    arr = pa.array(values, pa.binary())
    assert fnv1a_32_array(arr).to_pylist() == expected
    assert fnv1a_32_array(pa.array(values, pa.large_binary())).to_pylist() == expected
    padded = pa.array([b"pad", *values], pa.binary()).slice(1)
    assert fnv1a_32_array(padded).to_pylist() == expected


@SETTINGS
@given(subjects=st.lists(st.lists(st.sampled_from([*TOKENS, " ", "a b", "\t", "\r", "\n", "\f", "\x00"]),
                                  min_size=1, max_size=4).map(".".join), max_size=30))
def test_check_sendable_subjects_equals_scalar(subjects: list[str]) -> None:
    """The byte scan and regex of ``check_sendable_subjects`` refuse the first row the scalar
    ``is_sendable_subject`` refuses, naming it, in every layout."""
    first = next((i for i, s in enumerate(subjects) if not is_sendable_subject(s)), None)
    for col in layouts(subjects):
        if first is None:
            check_sendable_subjects(col, "t")
        else:
            with pytest.raises(SubjectError, match=rf"invalid subject .* \(t: row {first} of column 'subject'\)"):
                check_sendable_subjects(col, "t")
