"""Keeping object-store secrets out of every text jsspark shows: errors, logs, progress.

Executors need this around each read, so it lives apart from the option parsing (which pulls
the config models) and stays cheap to import in a fresh Spark Python worker.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

# Storage option keys whose values are secrets (AWS secret key and session token, Azure account
# key and SAS, GCS service account key, ...): scrubbed from any text jsspark shows.
SECRET_STORAGE_KEY = re.compile(r"secret|token|password|passwd|sas|signature|credential|private|key$", re.I)


# The userinfo of a URL: ``scheme://user:password@`` (group 2 the user) or ``scheme://token@``.
# The password or token runs to the authority's last ``@``, as nats-py's ``urlparse`` and
# nats.go's ``url.Parse`` read it: ``nats://alice:pw@rest@host`` authenticates with ``pw@rest``.
_URL_USERINFO = re.compile(r"(\b[a-z][\w+.-]*://)(?:([^/@\s:]*):)?([^/\s]+)@", re.I)


def redact_urls(text: str) -> str:
    """``text`` with the secret of every URL's userinfo (the password of ``user:password@``, or
    the token of ``token@``) replaced by ``***``; the user stays, to say who connected."""
    return _URL_USERINFO.sub(lambda m: f"{m.group(1)}{'' if m.group(2) is None else m.group(2) + ':'}***@", text)


def url_secrets(urls: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """The passwords and tokens in URLs' userinfo, to scrub wherever else they show up."""
    texts = [urls] if isinstance(urls, str) else list(urls or ())
    return [m.group(3) for text in texts for m in _URL_USERINFO.finditer(text) if len(m.group(3)) >= 4]


def redact_storage_options(options: Mapping[str, str] | None, mask: str = "***") -> dict[str, str]:
    """Storage options to show: each secret one's value (``SECRET_STORAGE_KEY``) as ``mask``."""
    return {k: (mask if v and SECRET_STORAGE_KEY.search(k) else v) for k, v in (options or {}).items()}


def storage_secrets(options: Mapping[str, str] | None) -> list[str]:
    """The secret values among storage options, longest first (for scrubbing texts)."""
    found = {v for k, v in (options or {}).items() if v and len(v) >= 4 and SECRET_STORAGE_KEY.search(k)}
    return sorted(found, key=len, reverse=True)


def redact_storage(text: str, options: Mapping[str, str] | None) -> str:
    for secret in storage_secrets(options):
        text = text.replace(secret, "***")
    return text


class StorageError(RuntimeError):
    """An error whose text held a storage secret, with the secret replaced by ``***``."""


@contextmanager
def scrubbed(options: Mapping[str, str] | None) -> Iterator[None]:
    """Errors raised inside leave with no storage secret in their text: one that held a secret
    (an object store error may show a URL with a SAS signature) is raised again as
    ``StorageError`` with it replaced, without the original as its cause."""
    try:
        yield
    except Exception as e:
        text = str(e)
        clean = redact_storage(text, options)
        if clean == text:
            raise
        raise StorageError(f"{type(e).__name__}: {clean}") from None
