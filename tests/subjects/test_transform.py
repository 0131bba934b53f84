"""Subject-transform vectors from subject_transform_test.go, sublist_test.go and the reference."""

from __future__ import annotations

import pytest
from subjects_vectors import MATCH, MUST_FAIL, SHOULD_BE_OK

from jsspark.errors import SubjectTransformError
from jsspark.subjects import SubjectTransform, fnv1a_32, subject_text, validate_mapping
from jsspark.subjects.mapping import Fn, Placeholder, parse_placeholder


@pytest.mark.parametrize(("src", "dest", "subject", "expected"), MATCH)
def test_transform_vectors(src: str, dest: str, subject: str, expected: str) -> None:
    tr = SubjectTransform(src, dest)
    assert tr.matches(subject)
    assert tr.apply(subject) == expected
    assert tr.apply_or_keep(subject) == expected


@pytest.mark.parametrize(("src", "dest", "strict", "message"), MUST_FAIL)
def test_must_fail_with_server_text(src: str, dest: str, strict: bool, message: str) -> None:
    with pytest.raises(SubjectTransformError) as exc:
        SubjectTransform(src, dest, strict=strict)
    assert str(exc.value) == message


@pytest.mark.parametrize(("src", "dest", "strict"), SHOULD_BE_OK)
def test_should_be_ok(src: str, dest: str, strict: bool) -> None:
    tr = SubjectTransform(src, dest, strict=strict)
    assert (tr.src, tr.dest) == (src, dest)
    if not strict:
        validate_mapping(src, dest)


def test_random_stays_in_range() -> None:
    tr = SubjectTransform("*", "bar.{{random(6)}}")
    seen = {tr.apply("qux") for _ in range(300)}
    assert seen <= {f"bar.{i}" for i in range(6)}
    assert len(seen) > 1


def test_validate_mapping_is_stricter_than_plain_constructor() -> None:
    # whitespace inside a token is fine for republish's plain constructor, not for ValidateMapping
    with pytest.raises(SubjectTransformError, match=r"^invalid mapping destination: invalid transform$"):
        SubjectTransform("foo", "a b")
    assert SubjectTransform("foo", "a b", validate=False).apply("foo") == "a b"
    with pytest.raises(SubjectTransformError, match=r"^invalid mapping destination: invalid transform in x$"):
        validate_mapping("foo.>", "bar.>.x")


def test_apply_rejects_non_matching_and_invalid_subjects() -> None:
    tr = SubjectTransform("foo.*", "bar.$1")
    for subject, message in [("baz.a", "no matching transforms available"), ("foo.a.b", "no matching transforms available"),
                             ("foo..", "invalid subject"), ("foo.*", "invalid subject"), ("foo.>", "invalid subject")]:
        assert not tr.matches(subject)
        assert tr.apply_or_keep(subject) == subject
        with pytest.raises(SubjectTransformError) as exc:
            tr.apply(subject)
        assert str(exc.value) == message


def test_full_wildcard_identity_passes_anything() -> None:
    for src, dest in [("", ""), (">", ">"), ("", ">"), (">", "")]:
        tr = SubjectTransform(src, dest)
        assert tr.apply("foo..bar") == "foo..bar"
        assert tr.matches("foo.*")


def test_empty_dest_is_a_filter_only() -> None:
    tr = SubjectTransform("foo.*", "")
    assert tr.apply("foo.x") == "foo.x"
    assert not tr.matches("bar.x")
    with pytest.raises(SubjectTransformError, match="no matching transforms available"):
        tr.apply("bar.x")


def test_missing_token_writes_nothing() -> None:
    # TestSubjectTransformDoesntPanicTransformingMissingToken
    tr = SubjectTransform("foo.*", "one.two.{{wildcard(1)}}")
    assert tr.transform("foo") == "one.two."


def test_strict_reverse_helper_vector() -> None:
    # TestSubjectTransformHelpers: foo.*.* -> bar.$2.{{Wildcard(1)}} on foo.b.a and back
    tr = SubjectTransform("foo.*.*", "bar.$2.{{Wildcard(1)}}", strict=True)
    assert tr.apply("foo.b.a") == "bar.a.b"
    assert SubjectTransform("bar.*.*", "foo.$2.$1", strict=True).apply("bar.a.b") == "foo.b.a"


PLACEHOLDERS = [
    ("$1", Placeholder(Fn.WILDCARD, (1,))),
    ("{{partition(10,1,2,3)}}", Placeholder(Fn.PARTITION, (1, 2, 3), 10)),
    ("{{ Partition (10,1,2,3) }}", Placeholder(Fn.PARTITION, (1, 2, 3), 10)),
    ("{{wildcard(2)}}", Placeholder(Fn.WILDCARD, (2,))),
    ("{{SplitFromLeft(2,1)}}", Placeholder(Fn.SPLIT_FROM_LEFT, (2,), 1)),
    ("{{SplitFromRight(3,2)}}", Placeholder(Fn.SPLIT_FROM_RIGHT, (3,), 2)),
    ("{{SliceFromLeft(2,2)}}", Placeholder(Fn.SLICE_FROM_LEFT, (2,), 2)),
    ("{{Left(3,2)}}", Placeholder(Fn.LEFT, (3,), 2)),
    ("{{Right(3,2)}}", Placeholder(Fn.RIGHT, (3,), 2)),
    ("{{split(1,-)}}", Placeholder(Fn.SPLIT, (1,), -1, "-")),
    ("{{random(7)}}", Placeholder(Fn.RANDOM, (), 7)),
    ("{{partition(-1)}}", Placeholder(Fn.PARTITION, (), -1)),
    ("{{partition(-4294967297)}}", Placeholder(Fn.PARTITION, (), -1)),  # Go's int32() truncation
    ("$foo", Placeholder(Fn.LITERAL)),
    ("$ 1", Placeholder(Fn.LITERAL)),
    ("$", Placeholder(Fn.LITERAL)),
    ("{{}}", Placeholder(Fn.LITERAL)),
    ("bar", Placeholder(Fn.LITERAL)),
]


@pytest.mark.parametrize(("token", "expected"), PLACEHOLDERS)
def test_place_holder_index(token: str, expected: Placeholder) -> None:
    # TestPlaceHolderIndex
    assert parse_placeholder(token) == expected


def test_fnv1a_known_values() -> None:
    assert fnv1a_32(b"") == 2166136261
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968
    assert [fnv1a_32(k) % 10 for k in (b"foo", b"foo.bar", b"baz", b"qux", b"foo.baz")] == [3, 6, 0, 9, 4]
    assert fnv1a_32(b"test.subject") % 5 == 0


def test_negative_partition_count_wraps_like_go() -> None:
    # partition(-3): Go computes h % uint32(-3)
    tr = SubjectTransform("*", "{{partition(-3)}}")
    assert tr.apply("foo") == str(fnv1a_32(b"foo") % (2**32 - 3))


def test_byte_semantics_on_multibyte_tokens() -> None:
    """Functions cut bytes; a cut character comes back as the server's JSON API shows it,
    U+FFFD for each byte that is not UTF-8 (Go's rule, not Python's ``errors="replace"``)."""
    assert SubjectTransform("*", "{{left(1,1)}}").apply("é") == "\ufffd"
    assert SubjectTransform("*", "{{left(1,2)}}").apply("€x") == "\ufffd\ufffd"
    assert SubjectTransform("*", "{{right(1,2)}}").apply("x€") == "\ufffd\ufffd"
    assert SubjectTransform("*", "{{splitFromLeft(1,1)}}").apply("é") == "\ufffd.\ufffd"
    assert SubjectTransform("*", "{{sliceFromLeft(1,3)}}").apply("a€é") == "a\ufffd\ufffd.\ufffdé"
    assert SubjectTransform("*", "{{left(1,3)}}").apply("€x") == "€"
    assert SubjectTransform("*", "{{split(1,)}}").apply("aé") == "a.é"


def test_subject_text_follows_go_json() -> None:
    """``json.Marshal``: one U+FFFD per byte that starts no valid sequence."""
    assert subject_text(b"\xe2\x82x") == "\ufffd\ufffdx"  # Python's "replace" writes one
    assert subject_text(b"\xf0\x9f\x98") == "\ufffd" * 3
    assert subject_text(b"\xed\xa0\x80") == "\ufffd" * 3  # a surrogate's encoding
    assert subject_text(b"\xc0\x80.\xff") == "\ufffd\ufffd.\ufffd"
    assert subject_text("ok.€.\ufffd".encode()) == "ok.€.\ufffd"
