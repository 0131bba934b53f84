"""Subject-transform vectors from subject_transform_test.go, sublist_test.go and the reference."""

from __future__ import annotations

import pytest

from jsspark.errors import SubjectTransformError
from jsspark.subjects import SubjectTransform, fnv1a_32, validate_mapping
from jsspark.subjects.mapping import Fn, Placeholder, parse_placeholder

# TestSubjectTransforms shouldMatch + reference §2 conformance vectors: (src, dest, input, output)
MATCH = [
    ("", "prefix.>", "foo", "prefix.foo"),
    ("foo", "", "foo", "foo"),
    ("foo", "bar", "foo", "bar"),
    ("foo.*.bar.*.baz", "req.$2.$1", "foo.A.bar.B.baz", "req.B.A"),
    ("foo.*.bar.*.baz", "req.{{wildcard(2)}}.{{wildcard(1)}}", "foo.A.bar.B.baz", "req.B.A"),
    ("baz.>", "my.pre.>", "baz.1.2.3", "my.pre.1.2.3"),
    ("baz.>", "foo.bar.>", "baz.1.2.3", "foo.bar.1.2.3"),
    ("*", "foo.bar.$1", "foo", "foo.bar.foo"),
    ("*", "{{splitfromleft(1,3)}}", "12345", "123.45"),
    ("*", "{{SplitFromRight(1,3)}}", "12345", "12.345"),
    ("*", "{{SliceFromLeft(1,3)}}", "1234567890", "123.456.789.0"),
    ("*", "{{SliceFromRight(1,3)}}", "1234567890", "1.234.567.890"),
    ("*", "{{split(1,-)}}", "-abc-def--ghi-", "abc.def.ghi"),
    ("*", "{{split(1,-)}}", "abc-def--ghi-", "abc.def.ghi"),
    ("*.*", "{{split(2,-)}}.{{splitfromleft(1,2)}}", "foo.-abc-def--ghij-", "abc.def.ghij.fo.o"),
    ("*", "{{right(1,1)}}", "1234", "4"),
    ("*", "{{right(1,3)}}", "1234", "234"),
    ("*", "{{right(1,6)}}", "1234", "1234"),
    ("*", "{{left(1,1)}}", "1234", "1"),
    ("*", "{{left(1,3)}}", "1234", "123"),
    ("*", "{{left(1,6)}}", "1234", "1234"),
    ("*", "bar.{{partition(0)}}", "baz", "bar.0"),
    ("*", "bar.{{partition(10, 0)}}", "foo", "bar.3"),
    ("*.*", "bar.{{partition(10)}}", "foo.bar", "bar.6"),
    ("*", "bar.{{partition(10)}}", "foo", "bar.3"),
    ("*", "bar.{{partition(10)}}", "baz", "bar.0"),
    ("*", "bar.{{partition(10)}}", "qux", "bar.9"),
    ("*", "bar.{{random(0)}}", "qux", "bar.0"),
    ("foo.bar", "baz.{{partition(10)}}", "foo.bar", "baz.6"),
    ("foo.baz", "qux.{{partition(10)}}", "foo.baz", "qux.4"),
    ("test.subject", "result.{{partition(5)}}", "test.subject", "result.0"),
    ("tp.*.*", "p.{{partition(10,1,2)}}", "tp.a.b", "p.6"),
    ("tl.*", "x.{{left(1,2)}}.{{right(1,2)}}", "tl.abcdef", "x.ab.ef"),
    # quirks: split with 2+ leading delimiters, index <= 0 is position 0, literal source ignores partition args
    ("*", "{{split(1,-)}}", "--b", ".b"),
    ("*", "{{split(1,-)}}", "-b", "b"),
    ("foo.*", "x.{{wildcard(0)}}.$1", "foo.bar", "x.foo.bar"),
    ("foo.*", "x.{{splitFromLeft(-5,1)}}", "foo.bar", "x.f.oo"),
    ("foo", "x.{{partition(10,1)}}", "foo", "x.3"),
    ("foo.>", "x.$0.>", "foo.a.b", "x.foo.a.b"),
    ("*", "{{Partition(10)}}.{{ wildcard( 1 ) }}", "foo", "3.foo"),
    # `$foo` is a literal token; the `*x` source token is a wildcard for matching (subset quirk)
    ("foo.*", "$foo.$1", "foo.a", "$foo.a"),
    ("foo.*x", "bar", "foo.anything", "bar"),
]

# must fail (src, dest, strict, exact server text); the texts were checked against the 2.15.1 binary
MUST_FAIL = [
    ("foo..", "bar", False, "invalid subject"),
    ("foo.*", "bar.*", False, "invalid subject"),
    ("foo.*", "bar.$2", False, "invalid mapping destination: wildcard index out of range in $2: [2]"),
    ("foo.*", "bar.$1.>", False, "invalid subject"),
    ("foo.>", "bar.baz", False, "invalid subject"),
    ("foo.*", "foo.{{wildcard(2)}}", False,
     "invalid mapping destination: wildcard index out of range in {{wildcard(2)}}: [2]"),
    ("foo.*", "foo.{{unimplemented(1)}}", False, "invalid mapping destination: unknown function in {{unimplemented(1)}}"),
    ("foo.*", "foo.{{partition()}}", False,
     "invalid mapping destination: function argument is invalid or in the wrong format in {{partition()}}"),
    ("foo.*", "foo.{{random()}}", False,
     "invalid mapping destination: function argument is invalid or in the wrong format in {{random()}}"),
    ("foo.*", "foo.{{wildcard(foo)}}", False,
     "invalid mapping destination: function argument is invalid or in the wrong format in {{wildcard(foo)}}"),
    ("foo.*", "foo.{{wildcard()}}", False,
     "invalid mapping destination: not enough arguments passed to the function in {{wildcard()}}"),
    ("foo.*", "foo.{{wildcard(1,2)}}", False,
     "invalid mapping destination: too many arguments passed to the function in {{wildcard(1,2)}}"),
    ("foo.*", "foo.{{ wildcard5) }}", False, "invalid mapping destination: unknown function in {{ wildcard5) }}"),
    ("foo.*", "foo.{{splitLeft(2,2}}", False, "invalid mapping destination: unknown function in {{splitLeft(2,2}}"),
    ("foo", "bla.{{wildcard(1)}}", False, "invalid mapping destination: wildcard index out of range in {{wildcard(1)}}"),
    ("foo.*", "foo.{{partition(2147483648)}}", False,
     "invalid mapping destination: function argument is invalid or in the wrong format in {{partition(2147483648)}}"),
    ("foo.*", "foo.{{random(2147483648)}}", False,
     "invalid mapping destination: function argument is invalid or in the wrong format in {{random(2147483648)}}"),
    ("foo.*", "foo.{{random(1,2)}}", False,
     "invalid mapping destination: not enough arguments passed to the function in {{random(1,2)}}"),
    ("*", "{{left()}}", False, "invalid mapping destination: not enough arguments passed to the function in {{left()}}"),
    ("*", "{{right(1,2,3)}}", False,
     "invalid mapping destination: too many arguments passed to the function in {{right(1,2,3)}}"),
    ("*", "{{splitFromLeft(1,2147483648)}}", False,
     "invalid mapping destination: function argument is invalid or in the wrong format in {{splitFromLeft(1,2147483648)}}"),
    ("*", "{{split(1,- )}}", False,
     "invalid mapping destination: function argument is invalid or in the wrong format in {{split(1,- )}}"),
    ("foo.>", "{{wildcard(1)}}.>", False, "invalid mapping destination: wildcard index out of range in {{wildcard(1)}}: [1]"),
    ("foo", "foo..}", False, "invalid mapping destination: invalid transform"),
    ("foo", "foo. bar}", False, "invalid mapping destination: invalid transform"),
    ("foo.*", "bar.>.x", False, "invalid mapping destination: invalid transform in x"),
    ("foo.*", "{{PARTITION(1)}}", False, "invalid mapping destination: unknown function in {{PARTITION(1)}}"),
    ("foo.*.*", "bar.$2", True, "invalid mapping destination: not using all of the token wildcard(s) in bar.$2"),
    ("foo.*", "foo.$foo", True, "invalid mapping destination: not using all of the token wildcard(s) in foo.$foo"),
    ("foo.*", "bar.{{Partition(2,1)}}", True,
     "invalid mapping destination: the only mapping function allowed for import transforms is {{Wildcard()}}"
     " in {{Partition(2,1)}}"),
]

SHOULD_BE_OK = [
    ("foo.*", "bar.{{Wildcard(1)}}", True), ("foo.*.*", "bar.$2", False), ("foo.*.*", "bar.{{wildcard(1)}}", False),
    ("foo.*.*", "bar.{{partition(1)}}", False), ("foo.*.*", "bar.{{random(5)}}", False), ("foo", "bar", False),
    ("baz.>", "mybaz.>", False), ("*", "{{splitfromleft(1,1)}}", False), ("", "prefix.>", False),
    ("*.*", "{{partition(10,1,2)}}", False), ("foo.*.*", "foo.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(5,1,2)}}", False),
    ("foo.*", "foo.{{partition(2147483647)}}", False), ("foo.*", "foo.{{random(2147483647)}}", False),
    ("foo.bar", "foo.{{random(2147483647)}}", False), ("foo", "", False), ("", "", False),
    # TestValidateDestinationSubject
    ("bar", "foo", False), ("foo", "foo.bar", False), ("*", "{{wildcard(1)}}", False), ("foo.>", ">", False),
    ("foo.*.>", "bar.{{wildcard(1)}}.>", False), ("foo.*.bar", "bar.{{wildcard(1)}}.foo", False),
    ("foo.bar.>", "foo.bar.foo.>", False), ("*", "foo.{{ wildcard(1) }}", False), ("*", "foo.{{wildcard( 1 )}}", False),
    ("*", "foo.{{partition(2,1)}}", False), ("*.*", "foo.{{SplitFromLeft(2,1)}}", False),
    ("*.*", "foo.{{SplitFromRight(2,1)}}", False),
]


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
    tr = SubjectTransform("*", "{{left(1,1)}}")
    cut = tr.apply("é")
    assert cut.encode("utf-8", "surrogateescape") == "é".encode()[:1]
    assert SubjectTransform("*", "{{split(1,)}}").apply("aé") == "a.é"
