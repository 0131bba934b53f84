"""Differential tests: our subject code against the real nats-server 2.15.1.

Every disagreement fails. Waits are bounded by server round trips (PubAck, API replies,
PING/PONG flush), never by sleeping.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from subjects_rawjs import RawJS, core_deliveries, stream_error
from subjects_vectors import COLLIDE, MATCH, MATCHES, MUST_FAIL, SHOULD_BE_OK

from jsspark.errors import SubjectTransformError
from jsspark.subjects import (
    SubjectTransform,
    is_valid_publish_subject,
    is_valid_subject,
    subject_is_subset_match,
    subject_matches,
    subjects_collide,
)

pytestmark = pytest.mark.nats
Run = Callable[[Coroutine[Any, Any, Any]], Any]
HYPO = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def ours(src: str, dest: str) -> tuple[SubjectTransform | None, str | None]:
    try:
        return SubjectTransform(src, dest), None
    except SubjectTransformError as exc:
        return None, str(exc)


async def server_transform(js: RawJS, src: str, dest: str, subjects: list[str]) -> tuple[Any, list[str]]:
    """Create a stream with the transform; on success publish ``subjects`` and read back what was stored."""
    stream_subjects = sorted(set(subjects)) or ["unused.subject"]
    name, resp = await js.create_stream(stream_subjects, subject_transform={"src": src, "dest": dest})
    err = stream_error(resp)
    if err:
        return err, []
    try:
        stored = []
        for subject in subjects:
            ack = await js.publish(subject)
            assert "error" not in ack, ack
            stored.append(await js.stored_subject(name, ack["seq"]))
        return None, stored
    finally:
        await js.delete_stream(name)


def expected_error(src: str, message: str) -> tuple[int, str]:
    """The API error the server wraps our message in for a stream ``subject_transform``."""
    if src and not is_valid_subject(src):
        return 10155, f"stream transform source: invalid subject {src}"
    return 10156, f"stream transform: {message}"


def check_transform(js: RawJS, run: Run, src: str, dest: str, subjects: list[str]) -> None:
    tr, our_err = ours(src, dest)
    if src and not is_valid_subject(src):
        assert our_err is not None
    server_err, stored = run(server_transform(js, src, dest, subjects))
    if our_err is not None:
        assert server_err == expected_error(src, our_err), (src, dest)
        return
    assert server_err is None, (src, dest, server_err)
    assert tr is not None
    assert stored == [tr.apply_or_keep(s) for s in subjects], (src, dest)


@pytest.mark.parametrize(("src", "dest", "subject", "expected"), [m for m in MATCH if "random" not in m[1]])
def test_transform_vectors_match_server(rawjs: RawJS, run: Run, src: str, dest: str, subject: str,
                                        expected: str) -> None:
    check_transform(rawjs, run, src, dest, [subject, "nomatch.x.y.z.w.v"])


@pytest.mark.parametrize(("src", "dest", "strict", "message"), [m for m in MUST_FAIL if not m[2]])
def test_invalid_mappings_rejected_with_our_text(rawjs: RawJS, run: Run, src: str, dest: str, strict: bool,
                                                 message: str) -> None:
    server_err, _ = run(server_transform(rawjs, src, dest, []))
    assert server_err == expected_error(src, message)


@pytest.mark.parametrize(("src", "dest", "strict"), [m for m in SHOULD_BE_OK if not m[2]])
def test_valid_mappings_accepted(rawjs: RawJS, run: Run, src: str, dest: str, strict: bool) -> None:
    server_err, _ = run(server_transform(rawjs, src, dest, []))
    assert server_err is None


def check_matching(js: RawJS, run: Run, filter: str, subjects: list[str]) -> None:
    publishable = [s for s in subjects if is_valid_publish_subject(s)]
    got = run(core_deliveries(js.url, filter, publishable))
    assert got == [s for s in publishable if subject_matches(filter, s)], filter


def test_matching_vectors_match_server(rawjs: RawJS, run: Run) -> None:
    filters = sorted({f for _, f, _ in MATCHES if is_valid_subject(f)})
    subjects = sorted({s for s, _, _ in MATCHES})
    for f in filters:
        check_matching(rawjs, run, f, subjects)


async def server_overlap(js: RawJS, a: str, b: str) -> bool:
    """Does the server reject a stream whose subjects are ``a`` and ``b`` as overlapping?"""
    name, resp = await js.create_stream([a, b], no_ack=True)
    err = stream_error(resp)
    if err is None:
        await js.delete_stream(name)
        return False
    assert err == (10052, f'subject "{a}" overlaps with "{b}"'), err
    return True


@pytest.mark.parametrize(("a", "b", "expected"), [c for c in COLLIDE if c[0] != c[1]])
def test_collide_vectors_match_server(rawjs: RawJS, run: Run, a: str, b: str, expected: bool) -> None:
    assert run(server_overlap(rawjs, a, b)) is subjects_collide(a, b) is expected


# ---- property-based, against the server ------------------------------------------------------------

LIT_TOKENS = ["a", "b", "ab", "a-b", "--b", "abcdef", "*x", ">x", "$y"]
subject_st = st.lists(st.sampled_from(LIT_TOKENS), min_size=1, max_size=4).map(".".join)
filter_token = st.sampled_from(["a", "b", "ab", "*", "*x", ">x"])


@st.composite
def filters(draw: st.DrawFn) -> str:
    tokens = draw(st.lists(filter_token, min_size=1, max_size=4))
    if draw(st.booleans()):
        tokens.append(">")
    return ".".join(tokens)


@st.composite
def mappings(draw: st.DrawFn) -> tuple[str, str]:
    src = draw(st.one_of(filters(), st.just(""), st.just("a..b")))
    i = st.integers(-1, 3).map(str)
    n = st.sampled_from(["-2", "0", "1", "2", "3", "7", "x"])
    dest_token = st.one_of(
        st.sampled_from(["p", "q", "$1", "$2", "$0", "$z", "*", "{{unknown(1)}}", "{{PARTITION(2)}}", "a b"]),
        st.builds("{{{{wildcard({})}}}}".format, i),
        st.builds("{{{{partition({})}}}}".format, n),
        st.builds("{{{{Partition({},{},{})}}}}".format, n, i, i),
        st.builds("{{{{split({},{})}}}}".format, i, st.sampled_from(["-", "b", "", "x y"])),
        st.builds("{{{{{}({},{})}}}}".format,
                  st.sampled_from(["splitFromLeft", "SplitFromRight", "sliceFromLeft", "SliceFromRight", "left",
                                   "Right", "splitfromleft"]), i, n),
        st.builds("{{{{left({})}}}}".format, i),
    )
    dest_tokens = draw(st.lists(dest_token, min_size=0, max_size=3))
    if draw(st.booleans()):
        dest_tokens.append(">")
    return src, ".".join(dest_tokens)


@HYPO
@given(mapping=mappings(), subjects=st.lists(subject_st, min_size=1, max_size=4, unique=True))
def test_property_transforms_match_server(rawjs: RawJS, run: Run, mapping: tuple[str, str],
                                          subjects: list[str]) -> None:
    src, dest = mapping
    check_transform(rawjs, run, src, dest, subjects)


@HYPO
@given(filter=filters(), subjects=st.lists(subject_st, min_size=1, max_size=8, unique=True))
def test_property_matching_matches_server(rawjs: RawJS, run: Run, filter: str, subjects: list[str]) -> None:
    check_matching(rawjs, run, filter, subjects)


@HYPO
@given(a=filters(), b=filters())
def test_property_collide_matches_server(rawjs: RawJS, run: Run, a: str, b: str) -> None:
    if a != b:
        assert run(server_overlap(rawjs, a, b)) is subjects_collide(a, b)


async def server_filters_overlap(js: RawJS, a: str, b: str) -> bool:
    """Does the server refuse a consumer with ``filter_subjects: [a, b]`` as overlapping (10138)?"""
    name, resp = await js.create_stream([">"], no_ack=True)
    assert stream_error(resp) is None, resp
    try:
        resp = await js.api(f"CONSUMER.CREATE.{name}",
                            {"stream_name": name, "config": {"ack_policy": "none", "filter_subjects": [a, b]}})
    finally:
        await js.delete_stream(name)
    err = stream_error(resp)
    assert err in (None, (10138, "consumer subject filters cannot overlap")), err
    return err is not None


@HYPO
@given(a=filters(), b=filters())
def test_property_subset_matches_server_filter_overlap(rawjs: RawJS, run: Run, a: str, b: str) -> None:
    if a != b:
        expected = subject_is_subset_match(a, b) or subject_is_subset_match(b, a)
        assert run(server_filters_overlap(rawjs, a, b)) is expected
