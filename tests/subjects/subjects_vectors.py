"""Shared subject and transform vectors (from nats-server tests and the reference), used by the
scalar, vectorised and server-differential suites."""

from __future__ import annotations

# TestSublistMatchLiterals (literal, filter, expected)
MATCHES = [
    ("foo", "foo", True), ("foo", "bar", False), ("foo", "*", True), ("foo", ">", True),
    ("foo.bar", ">", True), ("foo.bar", "foo.>", True), ("foo.bar", "bar.>", False),
    ("stats.test.22", "stats.>", True), ("stats.test.22", "stats.*.*", True), ("foo.bar", "foo", False),
    ("stats.test.foos", "stats.test.foos", True), ("stats.test.foos", "stats.test.foo", False),
    ("stats.test", "stats.test.*", False), ("stats.test.foos", "stats.*", False),
    ("stats.test.foos", "stats.*.*.foos", False),
    ("*bar", "*bar", True), ("foo*", "foo*", True), ("foo*bar", "foo*bar", True),
    ("foo.***.bar", "foo.***.bar", True), (">bar", ">bar", True), ("foo>", "foo>", True),
    ("foo>bar", "foo>bar", True), ("foo.>>>.bar", "foo.>>>.bar", True),
    # `foo.>` needs at least one more token; `*bar` is not a wildcard for delivery
    ("foo", "foo.>", False), ("foo.xbar", "foo.*bar", False),
    # TestSublistMatchWithEmptyTokens: subjects with empty tokens match nothing, not even `>`
    (".foo", ">", False), ("..foo", ">", False), ("foo..", ">", False), ("foo.", ">", False),
    ("foo..bar", ">", False), ("foo...bar", ">", False),
]

# TestSublistSubjectCollide plus reference examples
COLLIDE = [
    ("foo.*", "foo.*.bar.>", False), ("foo.*.bar.>", "foo.*", False), ("foo.*", "foo.foo", True),
    ("foo.*", "*.foo", True), ("foo.bar.>", "*.bar.foo", True), ("foo", "foo", True), ("foo", "bar", False),
    ("foo.>", "foo", False), ("foo.*", "bar.*", False), ("foo.*.*", "foo.>", True), ("*.*", "*.*.*", False),
    ("foo.>", "*.bar.>", True), ("a.*x", "a.*", True), ("a.b", "a.*x", False),
]

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
    # Go integer conversions: a negative count is uint32-wrapped, a huge one int32-truncated (to 6)
    ("*", "p.{{partition(-3)}}", "foo", "p.2851307223"),
    ("*.*", "p.{{partition(-4294967290,2)}}", "a.foo", "p.3"),
    # an empty split delimiter splits into characters; a non-positive slice size leaves the token
    ("*", "{{split(1,)}}", "abc", "a.b.c"),
    ("*", "{{sliceFromLeft(1,-1)}}", "abc", "abc"),
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
