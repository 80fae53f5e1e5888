"""Keeping credentials off disk: every string that reaches a log, header or report is scrubbed.

A *known secret* is a value this process was given as a credential: an ``api_key``-like option
(registered with ``register_secret`` when a backend or a cell is built), the password of a URL's
userinfo, or the value of an environment variable whose name says it holds one (``*KEY*``,
``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``; 8 characters or more, so that a short flag value is not
mistaken for a key). ``scrub_text`` replaces every known secret with ``***``, and masks by shape
what looks like a credential even when it was never registered: the userinfo of every URL
(``http://user:KEY@host``, and ``user:KEY@host`` without a scheme), credential parameters of a
query string (``?key=``, ``&api-key=``, ``?token=``, ``sig=`` ...), credential headers written as
text (``api-key: ...``, ``Ocp-Apim-Subscription-Key: ...``, ``Authorization: Bearer ...``) and
``sk-...``-style keys. ``scrub_data`` does the same through nested dicts and lists. Model replies
are scrubbed too: a model can echo a key it was shown.

Mask first, cut second: text is scrubbed whole and only then truncated (``scrub_text(.., limit=)``),
so a cut can never leave the head of a key unmasked.
"""

from __future__ import annotations

import base64
import os
import re
import threading
from typing import Any

MASK = "***"
REDACTED = "<redacted>"
"""What a credential-named option's value is replaced with (never itself taken for a secret)."""
MIN_SECRET_CHARS = 8
_ENV_NAME_RE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
# Every repeat is bounded (a scheme of at most 32 characters, userinfo of at most 512), so that a
# long run of scheme-like or word characters costs linear time, not quadratic.
# scheme://userinfo@ : userinfo is everything up to the first '@' before the host's '/', '?' or '#'.
_URL_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,31}://)[^/?#\s@]{1,512}@")
# user:password@host without a scheme (not after "://", which the pattern above handles).
_BARE_USERINFO_RE = re.compile(r"(?<![\w/.:@%+~\-])[A-Za-z0-9._~%+\-]{1,128}:[^\s/@:?#'\"<>]{1,512}@(?=[A-Za-z0-9\[])")
# Query-string parameters that carry a credential; the value is masked, the name kept.
_QUERY_NAMES = (r"key|api[_-]?key|apikey|x-api-key|token|access[_-]?token|auth[_-]?token|auth|id[_-]?token|"
                r"refresh[_-]?token|secret|client[_-]?secret|password|passwd|pwd|sig|signature|"
                r"subscription[_-]?key|code|session|jwt|bearer")
_QUERY_SECRET_RE = re.compile(rf"(?i)([?&;](?:{_QUERY_NAMES})=)(?!\*\*\*)[^&#\s'\"<>]+")
# Credential headers written out as text ("api-key: V", '"Ocp-Apim-Subscription-Key": "V"').
_HEADER_NAMES = (r"authorization|proxy-authorization|api[_-]?key|x-api-key|x-goog-api-key|"
                 r"ocp-apim-subscription-key|x-auth-token|x-access-token|cookie|set-cookie")
_HEADER_SECRET_RE = re.compile(rf"(?i)\b((?:{_HEADER_NAMES})[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|token)\s+)?(?![*<])[^\s\"',;&]+")
# Bearer / Basic credentials and well-known key shapes wherever they appear.
_SHAPE_RES = (
    re.compile(r"(?i)\b((?:bearer|basic)\s+)(?=[A-Za-z]*[0-9_\-.=+/~])[A-Za-z0-9_\-.=+/~]{6,}"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"),
)
_HEADER_LITERALS = ("authorization", "api-key", "api_key", "apikey", "subscription-key", "auth-token",
                    "access-token", "cookie")
# Each shape with the literal text it cannot match without: the literal is looked for first (C
# speed), so ordinary text pays for no regex at all.
_GATED: tuple[tuple[re.Pattern[str], Any], ...] = (
    (_URL_USERINFO_RE, lambda t, low: "@" in t and "://" in t),
    (_BARE_USERINFO_RE, lambda t, low: "@" in t),
    (_QUERY_SECRET_RE, lambda t, low: "=" in t),
    (_HEADER_SECRET_RE, lambda t, low: any(n in low for n in _HEADER_LITERALS)),
    (_SHAPE_RES[0], lambda t, low: "bearer" in low or "basic" in low),
    (_SHAPE_RES[1], lambda t, low: "sk-" in t),
    (_SHAPE_RES[2], lambda t, low: "AIza" in t),
)


def has_shape(text: str) -> bool:
    """Could ``mask_shapes`` change ``text``? (Literal pre-checks first, then the patterns.)"""
    low = text.lower()
    return any(gate(text, low) and pat.search(text) for pat, gate in _GATED)


_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: Any) -> None:
    """Remember a credential so that it is scrubbed from everything written from now on."""
    if isinstance(value, str) and len(value) >= MIN_SECRET_CHARS and value != REDACTED and MASK not in value:
        with _lock:
            _registered.add(value)


def register_url_secrets(url: Any) -> None:
    """Remember the credentials a URL carries as secrets: its userinfo (``http://user:KEY@host``,
    also without a scheme; the password, ``user:password`` and its Basic-auth base64) and the
    values of credential parameters in its query string (``?key=KEY``)."""
    if not isinstance(url, str):
        return
    for m in re.finditer(r"(?i)(?:\b[a-z][a-z0-9+.\-]{0,31}://|(?<![\w/.:@%+~\-]))([^/?#\s@'\"<>]{1,512})@", url):
        userinfo = m.group(1)
        if ":" not in userinfo and "://" not in m.group(0):
            continue
        _user, _, password = userinfo.partition(":")
        register_secret(password)
        register_secret(userinfo)
        register_secret(base64.b64encode(userinfo.encode()).decode("ascii"))
    for m in _QUERY_SECRET_RE.finditer(url):
        register_secret(url[m.end(1):m.end()])


_SECRET_NAME_PARTS = ("api_key", "apikey", "secret", "password", "passwd", "authorization", "access_token",
                      "bearer", "subscription_key", "credential", "cookie", "auth_token", "session_token",
                      "refresh_token", "id_token", "api_token")


def is_secret_name(name: Any) -> bool:
    """True for an option or header name that holds a credential (``api_key``, ``password``,
    ``*_key``, ``access_token``; header spellings too: ``api-key``, ``x-api-key``,
    ``Ocp-Apim-Subscription-Key``, ``Authorization``). Not ``*_per_token`` prices or a
    tokenizer's ``pad_token``."""
    low = str(name).lower().replace("-", "_")
    return (any(s in low for s in _SECRET_NAME_PARTS) or low.endswith("_key")
            or low in ("key", "token", "auth", "sig", "signature"))


_ENV_SEEN: tuple[tuple[Any, ...], frozenset[str]] | None = None
"""The environment's raw entries when last read, and the secrets found in them."""


def _environment_secrets() -> frozenset[str]:
    """Values of the environment variables whose names say they hold a credential. The variables
    are read again only when the environment changed (compared raw: a tuple of its entries, where
    decoding and matching every name cost about 0.1 ms on each record written)."""
    global _ENV_SEEN
    raw = getattr(os.environ, "_data", None)
    snapshot = tuple(raw.items()) if isinstance(raw, dict) else None
    seen = _ENV_SEEN
    if snapshot is not None and seen is not None and seen[0] == snapshot:
        return seen[1]
    found = frozenset(v for k, v in os.environ.items() if _ENV_NAME_RE.search(k) and len(v) >= MIN_SECRET_CHARS)
    if snapshot is not None:
        _ENV_SEEN = (snapshot, found)
    return found


def known_secrets() -> list[str]:
    """Every known secret, longest first (so a key is masked before any key it contains)."""
    with _lock:
        found = set(_registered)
    found.update(_environment_secrets())
    return sorted(found, key=len, reverse=True)


def redact_url(url: str) -> str:
    """``url`` with its userinfo (``user:password@``, with or without a scheme) replaced by
    ``***@`` and the values of credential parameters in its query string by ``***``.
    Deterministic: it looks at the text only, never at the environment."""
    if "@" in url:
        url = _URL_USERINFO_RE.sub(lambda m: m.group(1) + MASK + "@", url)
        url = _BARE_USERINFO_RE.sub(MASK + "@", url)
    if "=" in url:
        url = _QUERY_SECRET_RE.sub(lambda m: m.group(1) + MASK, url)
    return url


def strip_userinfo(url: str) -> str:
    """``url`` without its ``user:password@`` (HTTP clients turn it into a Basic-auth header)."""
    return re.sub(r"(?i)^([a-z][a-z0-9+.\-]*://)[^/?#\s@]+@", r"\1", url.strip())


def mask_shapes(text: str) -> str:
    """``text`` with everything shaped like a credential masked (see the module docstring)."""
    text = redact_url(text)
    low = text.lower()
    for pat, gate in _GATED[3:]:
        if gate(text, low):
            text = pat.sub(lambda m: (m.group(1) if m.re.groups else "") + MASK, text)
    return text


def scrub_text(text: str, secrets: list[str] | None = None, *, limit: int | None = None) -> str:
    """``text`` with every known secret and everything shaped like a credential replaced by
    ``***``; then, when ``limit`` is given, cut to ``limit`` characters (masking first, so a
    cut never splits a key before it was recognised)."""
    for s in known_secrets() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, MASK)
    if has_shape(text):
        text = mask_shapes(text)
    return text if limit is None else text[:limit]


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


def may_hold_secret(text: str, secrets: list[str], *, quick: bool = False) -> bool:
    """Cheap pre-check on serialised text: could ``scrub_data`` change anything in it?

    Secrets are looked for raw and JSON-escaped, so a serialised record is checked without
    parsing it; only a hit pays for the walk through the record. ``quick`` (for reading logs
    back, once per line) looks only for the shapes that need an ``@`` or ``=`` (URL userinfo,
    query-string keys): single-character scans, where the full check costs about ten times as
    much per line. Records written by this version had every shape masked when written.
    """
    if quick:
        if ("@" in text and (_URL_USERINFO_RE.search(text) or _BARE_USERINFO_RE.search(text))) or (
                "=" in text and _QUERY_SECRET_RE.search(text)):
            return True
    elif has_shape(text):
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
