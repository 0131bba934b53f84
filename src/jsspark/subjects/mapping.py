"""Parsing and validating subject-mapping destinations (``$1``, ``{{partition(10,1)}}``, ...).

A port of ``indexPlaceHolders``, ``NewSubjectTransformWithStrict`` and ``ValidateMapping`` from
``server/subject_transform.go`` / ``server/sublist.go``. Error messages are the server's
exact texts, because config code surfaces them verbatim in API errors (10146, 10156, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from jsspark.errors import SubjectTransformError
from jsspark.subjects.tokens import FWC, PWC, TSEP

INVALID_SUBJECT = "invalid subject"
NO_MATCHING_TRANSFORM = "no matching transforms available"
_DEST = "invalid mapping destination"
INVALID_TRANSFORM = f"{_DEST}: invalid transform"
NOT_USING_ALL_WILDCARDS = f"{_DEST}: not using all of the token wildcard(s)"
UNKNOWN_FUNCTION = f"{_DEST}: unknown function"
INDEX_OUT_OF_RANGE = f"{_DEST}: wildcard index out of range"
NOT_ENOUGH_ARGS = f"{_DEST}: not enough arguments passed to the function"
INVALID_ARG = f"{_DEST}: function argument is invalid or in the wrong format"
TOO_MANY_ARGS = f"{_DEST}: too many arguments passed to the function"
IMPORT_ONLY_WILDCARD = f"{_DEST}: the only mapping function allowed for import transforms is {{{{Wildcard()}}}}"

_INT32_MAX = 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_GO_SPACE = r"[\t\n\f\r ]"  # Go's RE2 \s is ASCII-only, unlike Python's
_GO_INT = re.compile(r"[+-]?[0-9]+")
_COMMA = re.compile(rf",{_GO_SPACE}*")
_WHITESPACE = frozenset("\t\n\f\r ")


class Fn(Enum):
    """Kinds of destination token, in the order the server tries them."""

    LITERAL = "literal"
    WILDCARD = "wildcard"
    PARTITION = "partition"
    SPLIT_FROM_LEFT = "splitFromLeft"
    SPLIT_FROM_RIGHT = "splitFromRight"
    SLICE_FROM_LEFT = "sliceFromLeft"
    SLICE_FROM_RIGHT = "sliceFromRight"
    RIGHT = "right"
    LEFT = "left"
    SPLIT = "split"
    RANDOM = "random"


def _function_regex(name: str) -> re.Pattern[str]:
    """``{{\\s*[nN]ame\\s*\\((.*)\\)\\s*}}``: only the first letter of each word part is case-free."""
    parts = re.findall(r"[a-z]+|[A-Z][a-z]*", name[0].upper() + name[1:])
    body = "".join(f"[{p[0].lower()}{p[0].upper()}]{p[1:].lower()}" for p in parts)
    return re.compile(rf"{{{{{_GO_SPACE}*{body}{_GO_SPACE}*\((.*)\){_GO_SPACE}*}}}}")


_FUNCTION_REGEX = {fn: _function_regex(fn.value) for fn in Fn if fn is not Fn.LITERAL}
_INDEX_INT_FUNCTIONS = (Fn.SPLIT_FROM_LEFT, Fn.SPLIT_FROM_RIGHT, Fn.SLICE_FROM_LEFT, Fn.SLICE_FROM_RIGHT,
                        Fn.RIGHT, Fn.LEFT)


@dataclass(frozen=True)
class Placeholder:
    """One parsed destination token: its function, wildcard indexes (1-based) and arguments."""

    fn: Fn
    indexes: tuple[int, ...] = ()
    int_arg: int = -1
    str_arg: str = ""


@dataclass(frozen=True)
class DestToken:
    """A destination token resolved against the source: ``positions`` are 0-based source tokens."""

    text: str
    fn: Fn
    positions: tuple[int, ...] = ()
    int_arg: int = -1
    str_arg: str = ""


def _fail(reason: str, token: str = "") -> SubjectTransformError:
    return SubjectTransformError(f"{reason} in {token}" if token else reason)


def _atoi(text: str, bits: int = 64, trim: bool = True) -> int | None:
    """Go's ``strconv.Atoi`` / ``ParseInt(s, 10, bits)``, after ``strings.Trim(s, " ")`` when
    ``trim``; None where Go returns an error."""
    if trim:
        text = text.strip(" ")
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if bits != 64 else (_INT64_MIN, _INT64_MAX)
    return value if lo <= value <= hi else None


def _int32(value: int) -> int:
    """Go's ``int32(x)`` conversion: wrap to the signed 32-bit range."""
    value &= 0xFFFFFFFF
    return value - 2**32 if value > _INT32_MAX else value


def _function_args(fn: Fn, token: str) -> list[str] | None:
    m = _FUNCTION_REGEX[fn].search(token)
    return _COMMA.split(m.group(1)) if m else None


def _is_function_token(token: str) -> bool:
    return len(token) > 4 and token.startswith("{{") and token.endswith("}}")


def _count_arg(token: str, text: str) -> int:
    """The partition/random count: any Go int up to MaxInt32, then truncated to int32."""
    value = _atoi(text)
    if value is None or value > _INT32_MAX:
        raise _fail(INVALID_ARG, token)
    return _int32(value)


def parse_placeholder(token: str) -> Placeholder:
    """Classify one destination token exactly as ``indexPlaceHolders`` does."""
    if len(token) <= 1:
        return Placeholder(Fn.LITERAL)
    if token[0] == "$":
        index = _atoi(token[1:], trim=False)
        # `$foo` stays a literal: other features rely on tokens starting with `$`.
        return Placeholder(Fn.LITERAL) if index is None else Placeholder(Fn.WILDCARD, (index,))
    if not _is_function_token(token):
        return Placeholder(Fn.LITERAL)

    args = _function_args(Fn.WILDCARD, token)
    if args is not None:
        if len(args) == 1 and args[0] == "":
            raise _fail(NOT_ENOUGH_ARGS, token)
        if len(args) != 1:
            raise _fail(TOO_MANY_ARGS, token)
        index = _atoi(args[0])
        if index is None:
            raise _fail(INVALID_ARG, token)
        return Placeholder(Fn.WILDCARD, (index,))

    args = _function_args(Fn.PARTITION, token)
    if args is not None:
        count = _count_arg(token, args[0])
        indexes = []
        for arg in args[1:]:
            index = _atoi(arg)
            if index is None:
                raise _fail(INVALID_ARG, token)
            indexes.append(index)
        return Placeholder(Fn.PARTITION, tuple(indexes), count)

    for fn in _INDEX_INT_FUNCTIONS:
        args = _function_args(fn, token)
        if args is not None:
            if len(args) < 2:
                raise _fail(NOT_ENOUGH_ARGS, token)
            if len(args) > 2:
                raise _fail(TOO_MANY_ARGS, token)
            index, value = _atoi(args[0]), _atoi(args[1], bits=32)
            if index is None or value is None:
                raise _fail(INVALID_ARG, token)
            return Placeholder(fn, (index,), value)

    args = _function_args(Fn.SPLIT, token)
    if args is not None:
        if len(args) < 2:
            raise _fail(NOT_ENOUGH_ARGS, token)
        if len(args) > 2:
            raise _fail(TOO_MANY_ARGS, token)
        index = _atoi(args[0])
        if index is None or " " in args[1] or TSEP in args[1]:
            raise _fail(INVALID_ARG, token)
        return Placeholder(Fn.SPLIT, (index,), -1, args[1])

    args = _function_args(Fn.RANDOM, token)
    if args is not None:
        if len(args) != 1:  # the server reports too many arguments as "not enough" here
            raise _fail(NOT_ENOUGH_ARGS, token)
        return Placeholder(Fn.RANDOM, (), _count_arg(token, args[0]))

    raise _fail(UNKNOWN_FUNCTION, token)


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
    """``subjectInfo``: valid (no empty token, nothing after ``>``), tokens, ``*`` count, has ``>``."""
    if not subject:
        return False, [], 0, False
    tokens = subject.split(TSEP)
    npwcs, fwc = 0, False
    for token in tokens:
        if not token or fwc:
            return False, [], 0, False
        if token == FWC:
            fwc = True
        elif token == PWC:
            npwcs += 1
    return True, tokens, npwcs, fwc


def compile_mapping(src: str, dest: str, strict: bool = False) -> tuple[list[str], list[DestToken]]:
    """``NewSubjectTransformWithStrict`` for a non-empty ``dest``: source tokens and resolved dest tokens."""
    src = src or FWC
    src_ok, stokens, npwcs, src_fwc = _subject_info(src)
    dest_ok, dtokens, dest_pwcs, dest_fwc = _subject_info(dest)
    if not src_ok or not dest_ok or dest_pwcs > 0 or src_fwc != dest_fwc:
        raise SubjectTransformError(INVALID_SUBJECT)

    out: list[DestToken] = []
    if npwcs > 0 or src_fwc:
        # N-th `*` (1-based) -> its token position; unknown indexes (<= 0) fall back to position 0.
        position_of = {n + 1: i for n, i in enumerate(i for i, t in enumerate(stokens) if t == PWC)}
        placed = 0
        for token in dtokens:
            ph = parse_placeholder(token)
            if strict and ph.fn not in (Fn.LITERAL, Fn.WILDCARD):
                raise _fail(IMPORT_ONLY_WILDCARD, token)
            if ph.fn in (Fn.LITERAL, Fn.RANDOM):
                out.append(DestToken(token, ph.fn, (), ph.int_arg, ph.str_arg))
                continue
            placed += len(ph.indexes)
            for index in ph.indexes:
                if index > npwcs:
                    raise _fail(INDEX_OUT_OF_RANGE, f"{token}: [{index}]")
            positions = tuple(position_of.get(index, 0) for index in ph.indexes)
            out.append(DestToken(token, ph.fn, positions, ph.int_arg, ph.str_arg))
        if strict and placed < npwcs:
            raise _fail(NOT_USING_ALL_WILDCARDS, dest)
    else:
        # A literal source can only feed literals, random and partition (which hashes the whole subject).
        for token in dtokens:
            ph = parse_placeholder(token)
            if ph.fn not in (Fn.LITERAL, Fn.RANDOM, Fn.PARTITION):
                raise _fail(INDEX_OUT_OF_RANGE, token)
            out.append(DestToken(token, ph.fn, (), ph.int_arg, ph.str_arg))
    return stokens, out


def validate_mapping(src: str, dest: str) -> None:
    """The server's ``ValidateMapping``, run on stream, source and mirror transforms (not republish).

    Stricter than building a transform: no whitespace outside function tokens, and any
    ``{{...}}`` token must name a known function. ``left``/``right`` are accepted, as the
    2.15.1 binary does (the Go source's list omits them).
    """
    if not dest:
        return
    seen_fwc = False
    for token in dest.split(TSEP):
        if not token or seen_fwc:
            raise _fail(INVALID_TRANSFORM, token)
        if _is_function_token(token):
            if not any(rx.search(token) for rx in _FUNCTION_REGEX.values()):
                raise _fail(UNKNOWN_FUNCTION, token)
            continue
        if token == FWC:
            seen_fwc = True
        elif not _WHITESPACE.isdisjoint(token):
            raise SubjectTransformError(INVALID_TRANSFORM)
    compile_mapping(src, dest)
