"""Keeping credentials off disk: every string that reaches a log, header or report is scrubbed.

A *known secret* is a value this process was given as a credential: an ``api_key``-like option
(registered with ``register_secret`` when a backend or a cell is built), the password of a URL's
userinfo, or the value of an environment variable whose name says it holds one (``*KEY*``,
``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``; 8 characters or more, so that a short flag value is not
mistaken for a key). ``scrub_text`` replaces every known secret with ``***`` and the userinfo of
every URL (``http://user:KEY@host``) with ``***``; ``scrub_data`` does the same through nested
dicts and lists. Model replies are scrubbed too: a model can echo a key it was shown.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any

MASK = "***"
MIN_SECRET_CHARS = 8
_ENV_NAME_RE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
# scheme://userinfo@ : userinfo is everything up to the first '@' before the host's '/', '?' or '#'.
_URL_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#\s@]+@")
_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: Any) -> None:
    """Remember a credential so that it is scrubbed from everything written from now on."""
    if isinstance(value, str) and len(value) >= MIN_SECRET_CHARS:
        with _lock:
            _registered.add(value)


def register_url_secrets(url: Any) -> None:
    """Remember the userinfo of a URL (``http://user:KEY@host/v1``) as a credential."""
    if not isinstance(url, str):
        return
    m = re.search(r"(?i)\b[a-z][a-z0-9+.\-]*://([^/?#\s@]+)@", url)
    if m:
        user, _, password = m.group(1).partition(":")
        register_secret(password)
        register_secret(m.group(1))


def known_secrets() -> list[str]:
    """Every known secret, longest first (so a key is masked before any key it contains)."""
    with _lock:
        found = set(_registered)
    found.update(v for k, v in os.environ.items() if _ENV_NAME_RE.search(k) and len(v) >= MIN_SECRET_CHARS)
    return sorted(found, key=len, reverse=True)


def redact_url(url: str) -> str:
    """``url`` with its userinfo (``user:password@``) replaced by ``***@``."""
    return _URL_USERINFO_RE.sub(lambda m: m.group(1) + MASK + "@", url)


def scrub_text(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with every known secret and every URL's userinfo replaced by ``***``."""
    for s in known_secrets() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, MASK)
    if "@" in text:
        text = redact_url(text)
    return text


def scrub_data(obj: Any, secrets: list[str] | None = None) -> Any:
    """A copy of a JSON-like value (dicts, lists, strings) with every string scrubbed."""
    secrets = known_secrets() if secrets is None else secrets
    if isinstance(obj, str):
        return scrub_text(obj, secrets)
    if isinstance(obj, dict):
        return {scrub_data(k, secrets): scrub_data(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(scrub_data(v, secrets) for v in obj)
    return obj


def may_hold_secret(text: str, secrets: list[str]) -> bool:
    """Cheap pre-check on serialised text: could ``scrub_data`` change anything in it?

    Secrets are looked for raw and JSON-escaped, so a serialised record is checked without
    parsing it; only a hit pays for the walk through the record.
    """
    if "@" in text and _URL_USERINFO_RE.search(text):
        return True
    for s in secrets:
        if s in text:
            return True
        escaped = _json_escaped(s)
        if escaped != s and escaped in text:
            return True
    return False


def _json_escaped(s: str) -> str:
    import json

    return json.dumps(s)[1:-1]
