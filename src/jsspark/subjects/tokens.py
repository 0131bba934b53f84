"""Subject grammar: validity, literal-ness, matching, subset and overlap, as nats-server does it.

Ported from ``server/sublist.go`` (``isValidSubject``, ``isSubsetMatchTokenized``,
``SubjectsCollide``) and ``server/jetstream.go`` (``isValidAssetName``). Checks work on the
UTF-8 bytes the server sees, so quirks such as "``*bar`` is a literal token" survive.
"""

from __future__ import annotations

import codecs

from jsspark.errors import SubjectError

PWC = "*"
FWC = ">"
TSEP = "."
_WHITESPACE = frozenset("\t\n\f\r ")
UNSENDABLE = " \t\r\n"
"""What no published subject holds: the server splits a ``PUB``/``HPUB`` line's arguments on space
and tab (``processPub``) and CR/LF end the line; nats-py refuses them (``_validate_subject``)."""
_ASSET_FORBIDDEN = frozenset(" \t\r\n\f.*>/\\")
MAX_ASSET_NAME_LEN = 255


def _go_replace(err: UnicodeError) -> tuple[str, int]:
    """Go's ``encoding/json`` rule: U+FFFD for the one byte that starts no valid sequence,
    then go on at the next byte (Python's ``replace`` writes one for a whole truncated
    sequence: ``e2 82`` is one U+FFFD there, two here)."""
    assert isinstance(err, UnicodeDecodeError)
    return "\ufffd", err.start + 1


codecs.register_error("jsspark.go_json", _go_replace)


def subject_text(data: bytes) -> str:
    """A subject of any bytes as the server's JSON API shows it (Go's ``json.Marshal``): each
    byte that is not part of valid UTF-8 becomes U+FFFD. The server stores such subjects as
    they are (a core publish, a transform cutting through a character); a lake subject is
    text, so it holds this."""
    return data.decode("utf-8", "jsspark.go_json")


def is_valid_subject(subject: str, check_runes: bool = False) -> bool:
    """A subject or filter the server accepts: no empty token, ``>`` last, no whitespace.

    ``check_runes`` also rejects NUL and text that was not valid UTF-8 (lone surrogates here).
    """
    if not subject:
        return False
    if check_runes:
        # Go sees U+FFFD both for a real replacement character and for undecodable bytes.
        if "\x00" in subject or "\ufffd" in subject:
            return False
        try:
            subject.encode("utf-8")
        except UnicodeEncodeError:
            return False
    seen_fwc = False
    for token in subject.split(TSEP):
        if not token or seen_fwc:
            return False
        if not _WHITESPACE.isdisjoint(token):
            return False
        if token == FWC:
            seen_fwc = True
    return True


def is_literal(subject: str) -> bool:
    """True when no token is exactly ``*`` or ``>`` (``foo*`` is literal); validity not checked."""
    return all(token not in (PWC, FWC) for token in subject.split(TSEP))


def is_valid_literal_subject(subject: str) -> bool:
    """Non-empty tokens and no wildcard token (the server's ``IsValidLiteralSubject``).

    Like the server this does not look for whitespace; use ``is_valid_publish_subject`` for that.
    """
    return all(token and token not in (PWC, FWC) for token in subject.split(TSEP))


def is_valid_publish_subject(subject: str) -> bool:
    """A valid subject without wildcards: what a client may publish to."""
    return is_valid_subject(subject) and is_literal(subject)


def is_sendable_subject(subject: str) -> bool:
    """A subject a client can publish to at all: non-empty, none of ``UNSENDABLE``. Looser than
    ``is_valid_publish_subject`` on purpose: a server (not pedantic) stores a JetStream publish
    to ``out.*``, ``out.a>`` or ``out.\\fa`` as it is; only the protocol line limits a subject."""
    return bool(subject) and not any(c in subject for c in UNSENDABLE)


def check_sendable_subject(subject: str, where: str = "") -> str:
    """``subject``, or ``SubjectError`` naming it (``where``: the row, for a batch)."""
    if not is_sendable_subject(subject):
        raise SubjectError(f"invalid subject {subject!r}{where}: a published subject is not empty and has no "
                           "space, tab, CR or LF (a NATS client can not send it: nats-py's BadSubjectError)")
    return subject


def is_valid_asset_name(name: str) -> bool:
    """Stream and consumer names become subject tokens, so they exclude separators and wildcards."""
    return bool(name) and len(name) <= MAX_ASSET_NAME_LEN and _ASSET_FORBIDDEN.isdisjoint(name)


def validate_asset_name(name: str, kind: str = "stream") -> str:
    """Return ``name`` or raise ``SubjectError`` saying what is wrong with it."""
    if not isinstance(name, str) or not name:
        raise SubjectError(f"{kind} name is required")
    if len(name) > MAX_ASSET_NAME_LEN:
        raise SubjectError(f"{kind} name {name!r} is longer than {MAX_ASSET_NAME_LEN} characters")
    bad = sorted(set(name) & _ASSET_FORBIDDEN)
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise SubjectError(f"{kind} name {name!r} can not contain {shown}")
    return name


def _subset_tokens(tokens: list[str], test: list[str]) -> bool:
    """``isSubsetMatchTokenized``: is every subject matched by ``tokens`` also matched by ``test``?

    Keeps the server's quirk that a ``test`` token merely *starting* with ``*`` acts as ``*``.
    """
    for i, t2 in enumerate(test):
        if i >= len(tokens) or not t2:
            return False
        if t2 == FWC:
            return True
        t1 = tokens[i]
        if not t1 or t1 == FWC:
            return False
        if t1 == PWC:
            if t2 != PWC:
                return False
            continue
        if t2[0] != PWC and t1 != t2:
            return False
    return len(tokens) == len(test)


def subject_is_subset_match(subject: str, test: str) -> bool:
    """True when every literal matched by ``subject`` is matched by ``test`` (``subjectIsSubsetMatch``)."""
    return _subset_tokens(subject.split(TSEP), test.split(TSEP))


def subject_matches(filter: str, subject: str) -> bool:
    """Would a subscription on ``filter`` receive a message published on ``subject``?

    Sublist semantics: a token is a wildcard only when it is exactly ``*`` or ``>``; ``>`` needs
    at least one more token, so ``foo.>`` does not match ``foo``. A subject with an empty token
    matches nothing, and an invalid filter matches nothing.
    """
    if not is_valid_subject(filter):
        return False
    stoks = subject.split(TSEP)
    if not all(stoks):
        return False
    ftoks = filter.split(TSEP)
    for i, ft in enumerate(ftoks):
        if ft == FWC:
            return i < len(stoks)
        if i >= len(stoks) or (ft != PWC and ft != stoks[i]):
            return False
    return len(stoks) == len(ftoks)


def _can_match(t1: str, t2: str) -> bool:
    """``tokensCanMatch``: like the server, only the first character decides wildcard-ness."""
    if not t1 or not t2:
        return False
    return t1[0] in (PWC, FWC) or t2[0] in (PWC, FWC) or t1 == t2


def _wildcards(tokens: list[str]) -> tuple[bool, bool]:
    return PWC in tokens, FWC in tokens


def subjects_collide(a: str, b: str) -> bool:
    """Could one literal subject match both ``a`` and ``b``? (the server's ``SubjectsCollide``)."""
    if a == b:
        return True
    ta, tb = a.split(TSEP), b.split(TSEP)
    pwc_a, fwc_a = _wildcards(ta)
    pwc_b, fwc_b = _wildcards(tb)
    lit_a, lit_b = not (pwc_a or fwc_a), not (pwc_b or fwc_b)
    if lit_a and lit_b:
        return False
    if lit_a:
        return _subset_tokens(ta, tb)
    if lit_b:
        return _subset_tokens(tb, ta)
    if len(ta) != len(tb):
        if not fwc_a and not fwc_b:
            return False
        if (len(ta) < len(tb) and not fwc_a) or (len(tb) < len(ta) and not fwc_b):
            return False
    return all(_can_match(x, y) for x, y in zip(ta, tb, strict=False))
