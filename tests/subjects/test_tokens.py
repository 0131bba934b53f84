"""Subject grammar vectors ported from nats-server's sublist_test.go and the reference digest."""

from __future__ import annotations

import pytest
from subjects_vectors import COLLIDE, MATCHES

from jsspark.errors import SubjectError
from jsspark.subjects import (
    is_literal,
    is_valid_asset_name,
    is_valid_literal_subject,
    is_valid_publish_subject,
    is_valid_subject,
    subject_is_subset_match,
    subject_matches,
    subjects_collide,
    validate_asset_name,
)

# TestSublistValidSubjects
VALID_SUBJECTS = {
    ".": False, ".foo": False, "foo.": False, "foo..bar": False, ">.bar": False, "foo.>.bar": False,
    "foo": True, "foo.bar.*": True, "foo.bar.>": True, "*": True, ">": True, "foo*": True, "foo**": True,
    "foo.**": True, "foo*bar": True, "foo.*bar": True, "foo*.bar": True, "*bar": True, "foo>": True,
    "foo.>>": True, "foo>bar": True, "foo.>bar": True, "foo>.bar": True, ">bar": True,
    "": False, "foo bar": False, "foo.\tbar": False, "foo.\n": False, "a.\r.b": False, "\f": False,
}

# TestSublistValidLiteralSubjects
VALID_LITERALS = {
    "foo": True, ".foo": False, "foo.": False, "foo..bar": False, "foo.bar.*": False, "foo.bar.>": False,
    "*": False, ">": False, "foo*": True, "foo**": True, "foo.**": True, "foo*bar": True, "foo.*bar": True,
    "foo*.bar": True, "*bar": True, "foo>": True, "foo>>": True, "foo.>>": True, "foo>bar": True,
    "foo.>bar": True, "foo>.bar": True, ">bar": True,
}

# TestSubjectIsLiteral
LITERALS = {
    "foo": True, "foo.bar": True, "foo*.bar": True, "*": False, ">": False, "foo.*": False, "foo.>": False,
    "foo.*.>": False, "foo.*.bar": False, "foo.bar.>": False,
}


# TestIsSubsetMatch plus the reference's examples and the `*`-prefix quirk
SUBSETS = [
    ("foo.bar", "foo.bar", True), ("foo.*", ">", True), ("foo.*", "*.*", True), ("foo.*", "foo.*", True),
    ("foo.*", "foo.bar", False), ("foo.>", ">", True), ("foo.>", "*.>", True), ("foo.>", "foo.>", True),
    ("foo.>", "foo.bar", False), ("foo..bar", "foo.*", False), ("foo.*", "foo..bar", False),
    ("foo", "foo.>", False), ("foo.bar", "foo.*x", True), ("foo.*", "foo.*x", False), ("foo.>", "foo.*", False),
]



@pytest.mark.parametrize(("subject", "expected"), VALID_SUBJECTS.items())
def test_valid_subject(subject: str, expected: bool) -> None:
    assert is_valid_subject(subject) is expected


def test_check_runes_rejects_nul_and_bad_utf8() -> None:
    assert is_valid_subject("foo.bar.baz.\x00") is True  # NUL is only a token byte without check_runes
    assert is_valid_subject("foo.bar.baz.\x00", check_runes=True) is False
    assert is_valid_subject("foo.b\x00r", check_runes=True) is False
    assert is_valid_subject("foo.\ufffd", check_runes=True) is False
    assert is_valid_subject(b"foo.\xff".decode("utf-8", "surrogateescape"), check_runes=True) is False
    assert is_valid_subject("foo.bär", check_runes=True) is True


@pytest.mark.parametrize(("subject", "expected"), VALID_LITERALS.items())
def test_valid_literal_subject(subject: str, expected: bool) -> None:
    assert is_valid_literal_subject(subject) is expected
    assert is_valid_publish_subject(subject) is expected


@pytest.mark.parametrize(("subject", "expected"), LITERALS.items())
def test_is_literal(subject: str, expected: bool) -> None:
    assert is_literal(subject) is expected


def test_publish_subject_rejects_whitespace_literal_does_not() -> None:
    assert is_valid_literal_subject("foo bar") is True  # the server's IsValidLiteralSubject
    assert is_valid_publish_subject("foo bar") is False


@pytest.mark.parametrize(("subject", "filter", "expected"), MATCHES)
def test_subject_matches(subject: str, filter: str, expected: bool) -> None:
    assert subject_matches(filter, subject) is expected


def test_invalid_filter_matches_nothing() -> None:
    assert subject_matches("foo..bar", "foo..bar") is False
    assert subject_matches(">.foo", "a.foo") is False


@pytest.mark.parametrize(("subject", "test", "expected"), SUBSETS)
def test_subset_match(subject: str, test: str, expected: bool) -> None:
    assert subject_is_subset_match(subject, test) is expected


@pytest.mark.parametrize(("a", "b", "expected"), COLLIDE)
def test_collide(a: str, b: str, expected: bool) -> None:
    assert subjects_collide(a, b) is expected
    assert subjects_collide(b, a) is expected


@pytest.mark.parametrize("name", ["ORDERS", "a-b_c", "x" * 255, "émoji"])
def test_valid_asset_names(name: str) -> None:
    assert is_valid_asset_name(name)
    assert validate_asset_name(name) == name


@pytest.mark.parametrize("name", ["", "a.b", "a*", "a>", "a b", "a\tb", "a\rb", "a\nb", "a\fb", "a/b", "a\\b",
                                  "x" * 256])
def test_invalid_asset_names(name: str) -> None:
    assert not is_valid_asset_name(name)
    with pytest.raises(SubjectError) as exc:
        validate_asset_name(name, kind="consumer")
    assert str(exc.value).startswith("consumer name")
    if name and len(name) <= 255:
        assert repr(name) in str(exc.value)
