"""The direct OpenAI-compatible transport: ``POST {api_base}/chat/completions`` through httpcore
(httpx's transport layer, h11 for HTTP/1.1), for ``openai/<name>`` models served at an
``api_base`` (vLLM, SGLang, the local test server) and the providers of
``agents.backends.providers``. Each request is sent and read by the thread that makes the call,
on a keep-alive pool shared by the threads, within the attempt's deadline; a proxy named by the
environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, honouring ``NO_PROXY``) carries it,
and with ``url_basic_auth`` the URL's ``user:password@`` goes as Basic auth.

It sends the body litellm sends for such a model (the name after ``openai/``, the messages,
temperature, max_tokens, tools, the reasoning parameters and any extra parameters) and raises the
errors the retry policy of ``litellm_backend`` classifies: an HTTP error status arrives as an
exception named like litellm's (``RateLimitError``, ``AuthenticationError``,
``ContextWindowExceededError``, ...) carrying ``status_code`` and the response headers (for
``Retry-After``). It never imports litellm: no import seconds, no per-call request building,
logging or cost-map lookups. Replies are untrusted: h11 refuses a malformed framing (conflicting
lengths, odd sizes, unknown transfer codings) as ``RemoteProtocolError``, and a body that is not
the chat-completion shape raises ``MalformedReply``; the retry policy treats both as transient.
Configuration that cannot go on the wire (a key or header value with a line break, NUL or a
non-ASCII character; a NaN in the parameters) is a ``UserError`` before the first request.

Bodies are read within bounds on both paths (``BoundedTransport`` for httpx): at most ``max_body_bytes`` on the wire and at most
``max_body_bytes`` once decompressed (gzip or deflate, decoded here in bounded steps, so a small
compressed bomb cannot fill memory), and a 2xx body that carries an ``error`` object instead of
``choices`` is turned into an HTTP 502 (the litellm transport gets the same treatment, so both
classify it alike). Error bodies are masked whole (``countgym.secrets``) before they are cut.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import ssl
import threading
import time
import zlib
from contextvars import ContextVar
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote, unquote, urlsplit
from urllib.request import getproxies, proxy_bypass

from countgym.dataurl import Base64DataURL
from countgym.errors import UserError
from countgym.limits import MAX_CONCURRENCY
from countgym.secrets import redact_url, register_secret, scrub_text, strip_userinfo

MAX_BODY_BYTES = 32 * 1024 * 1024
"""Default bound on a response body, on the wire and once decompressed (a chat reply with a
65,536-character answer and usage is well under 1 MB; images never come back)."""
BODY_LIMIT: ContextVar[int | None] = ContextVar("countgym_body_limit", default=None)
"""The body bound of the call in progress, for a ``bounded_transport`` shared by several backends
(litellm's session): set around each call, read by the transport."""
MAX_ERROR_MESSAGE_CHARS = 300
"""Characters of a provider's error message kept (after masking) in an error text."""

_ERROR_NAMES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "Timeout",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}
# Parameters litellm itself consumes; anything else in ``extra_params`` goes into the body.
_LITELLM_ONLY = frozenset({"drop_params", "num_retries", "max_retries", "timeout", "api_base", "api_key",
                           "extra_headers", "extra_body", "custom_llm_provider"})


class ProviderHTTPError(Exception):
    """An HTTP error status from the server (subclassed per status, named like litellm's)."""

    def __init__(self, status_code: int, message: str, headers: dict[str, str]) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.headers = headers


class MalformedReply(Exception):
    """A 2xx response whose body is not a chat completion."""


class ReplyTooLarge(MalformedReply):
    """A response body over the size bound (on the wire or decompressed), or in an encoding
    that cannot be decoded within it."""


_CLASSES: dict[str, type[ProviderHTTPError]] = {}


def _error_class(name: str) -> type[ProviderHTTPError]:
    if name not in _CLASSES:
        _CLASSES[name] = type(name, (ProviderHTTPError,), {})
    return _CLASSES[name]


def http_error(status: int, body: bytes, headers: dict[str, str]) -> ProviderHTTPError:
    """The exception for an error response: its class names the status the way litellm does."""
    message, code = "", ""
    try:
        err = json.loads(body).get("error")
        if isinstance(err, dict):
            message, code = str(err.get("message") or ""), str(err.get("code") or err.get("type") or "")
        elif err is not None:
            message = str(err)
    except (ValueError, AttributeError, TypeError, RecursionError):
        message = body.decode("utf-8", "replace")
    # Mask the whole message first, then cut: a cut first could leave most of a key unmasked.
    message = scrub_text(" ".join(message.split()), limit=MAX_ERROR_MESSAGE_CHARS)
    code = scrub_text(code, limit=80)
    name = _ERROR_NAMES.get(status, "APIError" if status >= 500 else "BadRequestError")
    low = f"{message} {code}".lower()
    if status == 400 and ("context_length_exceeded" in low or "maximum context length" in low):
        name = "ContextWindowExceededError"
    elif status == 400 and "content_policy" in low:
        name = "ContentPolicyViolationError"
    text = f"OpenAIException - HTTP {status}: {message or 'no message'}" + (f" ({code})" if code else "")
    return _error_class(name)(status, text, headers)


def _obj(x: Any) -> Any:
    """JSON as attribute objects, the shape the backend reads replies in."""
    if isinstance(x, dict):
        return SimpleNamespace(**{str(k): _obj(v) for k, v in x.items()})
    if isinstance(x, list):
        return [_obj(v) for v in x]
    return x


def parse_reply(raw: bytes) -> Any:
    """A chat-completion body as attribute objects; ``MalformedReply`` for any other shape."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise MalformedReply(f"reply is not JSON: {type(e).__name__}") from None
    if not isinstance(data, dict):
        raise MalformedReply("reply is not a JSON object")
    choices = data.get("choices")
    if choices is not None and not isinstance(choices, list):
        raise MalformedReply("reply 'choices' is not a list")
    for c in choices or []:
        msg = c.get("message") if isinstance(c, dict) else None
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), str | None):
            raise MalformedReply("reply choice has no message with text content")
        if not isinstance(msg.get("tool_calls"), list | None):
            raise MalformedReply("reply 'tool_calls' is not a list")
    usage = data.get("usage")
    if usage is not None and not isinstance(usage, dict):
        data["usage"] = None
    elif usage is not None:
        # Token counts that are not integers are unknown, not a crash further down.
        for k in ("prompt_tokens", "completion_tokens"):
            if not isinstance(usage.get(k), int | None) or isinstance(usage.get(k), bool):
                usage[k] = None
        details = usage.get("completion_tokens_details")
        if details is not None and (not isinstance(details, dict) or not isinstance(details.get("reasoning_tokens"), int | None)):
            usage["completion_tokens_details"] = None
    return _obj(data)


def request_body(model: str, wire: list[dict[str, Any]], params: dict[str, Any]) -> bytes:
    """The JSON body: ``model`` without its ``openai/`` prefix, the messages, then ``params``
    (temperature, max_tokens, tools, reasoning and extra parameters; ``extra_body`` merged in,
    litellm's own options left out), encoded once."""
    body: dict[str, Any] = {"model": model.split("/", 1)[1], "messages": wire}
    for k, v in params.items():
        if k not in _LITELLM_ONLY:
            body[k] = v
    extra = params.get("extra_body")
    if isinstance(extra, dict):
        body.update(extra)
    images: list[str] = []
    mark = f"countgym-image-{os.urandom(8).hex()}-"
    body["messages"] = [_with_marks(m, mark, images) for m in wire]
    text = json.dumps(body, separators=(",", ":"), allow_nan=False)
    if not images:
        return text.encode()
    # The images' data URLs go in as they are, between the rest's JSON: their base64 needs no
    # escaping, and the JSON encoder would scan every character of it under the interpreter
    # lock (about 0.5 ms per 100 kB; the check costs a fifth of that).
    pieces: list[bytes] = []
    for i, url in enumerate(images):
        before, found, text = text.partition(f'"{mark}{i}"')
        if not found:  # cannot happen: the encoder keeps the marks as they are, in order
            body["messages"] = wire
            return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
        pieces += [before.encode(), b'"', url.encode("ascii"), b'"']
    pieces.append(text.encode())
    return b"".join(pieces)


def check_params(params: dict[str, Any]) -> None:
    """``UserError`` unless the ``params`` that go into the body can be sent as JSON: no NaN or
    infinity (JSON has none; ``top_p = nan`` would go out as invalid JSON), no cycle, nothing
    JSON cannot hold. The message names the parameter."""
    sent = {k: v for k, v in params.items() if k not in _LITELLM_ONLY or k == "extra_body"}
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in sent.items()]
    seen: set[int] = set()
    while stack:
        path, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"model parameter {path} is {value}: a request body is JSON, which has no NaN or infinity")
        if isinstance(value, dict | list | tuple) and id(value) not in seen:
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack += [(f"{path}.{k}" if isinstance(value, dict) else f"{path}[{k}]", v) for k, v in items]
    try:
        json.dumps(sent, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise UserError(f"model parameters cannot be sent as JSON: {type(e).__name__}: {str(e)[:200]}") from None


_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
_SPLICE_MIN = 4096
"""Data URLs shorter than this are left to the JSON encoder."""


def json_safe_data_url(url: Any) -> bool:
    """Whether ``url`` is a base64 data URL whose JSON string is its own text (nothing to escape):
    an ASCII ``data:<type>;base64,`` head without quotes, backslashes or control characters, then
    only base64 characters. A ``Base64DataURL`` (``countgym.dataurl``) is one by construction."""
    if type(url) is Base64DataURL:
        return len(url) >= _SPLICE_MIN
    if not isinstance(url, str) or len(url) < _SPLICE_MIN or not url.startswith("data:"):
        return False
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64") or not head.isascii() or not head.isprintable():
        return False
    if '"' in head or "\\" in head or not payload.isascii():
        return False
    return not payload.encode("ascii").translate(None, _BASE64)


def _with_marks(message: Any, mark: str, images: list[str]) -> Any:
    """``message`` with each image part's JSON-safe data URL replaced by ``mark`` and its index
    in ``images`` (where the URL is appended); the message itself is not changed."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    parts: list[Any] = []
    changed = False
    for part in content:
        image = part.get("image_url") if isinstance(part, dict) else None
        url = image.get("url") if isinstance(image, dict) else None
        if isinstance(image, dict) and isinstance(url, str) and json_safe_data_url(url):
            parts.append({**part, "image_url": {**image, "url": f"{mark}{len(images)}"}})
            images.append(url)
            changed = True
        else:
            parts.append(part)
    return {**message, "content": parts} if changed else message


def _decode_bounded(raw: bytes, encoding: str, limit: int) -> bytes:
    """``raw`` decoded from its Content-Encoding, refusing more than ``limit`` bytes of output."""
    codings = [c.strip().lower() for c in encoding.split(",") if c.strip() and c.strip().lower() != "identity"]
    if not codings:
        return raw
    if len(codings) > 1 or codings[0] not in ("gzip", "x-gzip", "deflate"):
        raise ReplyTooLarge(f"reply in an unsupported content-encoding {encoding[:40]!r}")
    # gzip and zlib headers are detected (32 + 15); a raw deflate stream is tried next.
    for wbits in ((47,) if codings[0] != "deflate" else (47, -15)):
        d = zlib.decompressobj(wbits)
        try:
            out = d.decompress(raw, limit + 1)
        except zlib.error:
            continue
        if len(out) > limit or d.unconsumed_tail:
            raise ReplyTooLarge(f"reply decompresses to more than {limit} bytes")
        return out
    raise MalformedReply(f"reply is not valid {codings[0]} data")


def error_in_body(status: int, body: bytes) -> bool:
    """True for a 2xx body that is a JSON object carrying ``error`` and no ``choices`` (some
    proxies answer a failure with 200): it is handled as the failure it states (HTTP 502)."""
    if not 200 <= status < 300 or b'"error"' not in body:
        return False
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("error") not in (None, "", {}) and not data.get("choices")


def bounded_transport(inner: Any, max_body_bytes: int | None = None) -> Any:
    """An ``httpx.AsyncBaseTransport`` around ``inner`` that reads each body within
    ``max_body_bytes`` (raw and decoded; the response it returns is already decoded) and turns
    an error object inside a 2xx body into a 502. Without ``max_body_bytes`` the bound is the
    calling task's ``BODY_LIMIT`` (else ``MAX_BODY_BYTES``)."""
    import httpx

    class BoundedTransport(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: Any) -> Any:
            limit = max_body_bytes or BODY_LIMIT.get() or MAX_BODY_BYTES
            request.headers["Accept-Encoding"] = "gzip, deflate"  # the codings decoded here, bounded
            response = await inner.handle_async_request(request)
            chunks: list[bytes] = []
            size = 0
            try:
                async for chunk in response.stream:
                    size += len(chunk)
                    if size > limit:
                        raise ReplyTooLarge(f"reply body larger than {limit} bytes")
                    chunks.append(chunk)
            finally:
                await response.aclose()
            body = _decode_bounded(b"".join(chunks), response.headers.get("content-encoding", ""), limit)
            status = 502 if error_in_body(response.status_code, body) else response.status_code
            headers = [(k, v) for k, v in response.headers.multi_items()
                       if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
            return httpx.Response(status, headers=headers, content=body, request=request,
                                  extensions={k: v for k, v in response.extensions.items() if k != "network_stream"})

        async def aclose(self) -> None:
            await inner.aclose()

    return BoundedTransport()


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP_PROXY``/``HTTPS_PROXY``, else
    ``ALL_PROXY``; upper or lower case), or None when there is none or ``NO_PROXY`` exempts
    its host."""
    parts = urlsplit(url)
    proxies = getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or not parts.hostname:
        return None
    try:
        if proxy_bypass(parts.hostname):
            return None
    except OSError:
        pass
    return proxy if "://" in proxy else f"http://{proxy}"


def proxy_routing_transport(**options: Any) -> Any:
    """An ``httpx.AsyncBaseTransport`` that sends each request through the proxy the environment
    names for its URL (``env_proxy``), or straight when none applies: one
    ``httpx.AsyncHTTPTransport(**options)`` per proxy. (httpx reads the proxy variables only for
    the transports it makes itself, not for one handed to it.)"""
    import httpx

    class ProxyRouting(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner: dict[str | None, Any] = {}

        async def handle_async_request(self, request: Any) -> Any:
            proxy = env_proxy(str(request.url))
            inner = self._inner.get(proxy)
            if inner is None:
                inner = self._inner[proxy] = httpx.AsyncHTTPTransport(proxy=proxy, **options)
            return await inner.handle_async_request(request)

        async def aclose(self) -> None:
            for inner in self._inner.values():
                await inner.aclose()

    return ProxyRouting()


class ConnectError(OSError):
    """The origin could not be reached (refused, unknown host, unreachable network)."""


_DEADLINE: ContextVar[float | None] = ContextVar("countgym_attempt_deadline", default=None)
"""The ``time.monotonic()`` by which the calling thread's attempt must have its whole reply."""


def _left(timeout: float | None, late: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of the attempt's deadline; ``late`` once it has passed."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise late("the attempt's deadline passed")
    return left if timeout is None else min(timeout, left)


def _deadline_backend() -> Any:
    """httpcore's blocking sockets with every operation (connect, TLS handshake, each read and
    write) bounded by what is left of the calling thread's attempt deadline: a server that
    trickles a byte at a time cannot stretch an attempt past it (httpcore's own timeouts are per
    operation). Counts the connections it opens (``opened``)."""
    import httpcore

    class Stream(httpcore.NetworkStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

        def close(self) -> None:
            self._inner.close()

        def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                      timeout: float | None = None) -> Any:
            return Stream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout)))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class Backend(httpcore.SyncBackend):
        opened = 0

        def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                        socket_options: Any = None) -> Any:
            stream = super().connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout), local_address,
                                         socket_options)
            with _OPENED_LOCK:
                self.opened += 1
            return Stream(stream)

    return Backend()


_OPENED_LOCK = threading.Lock()
_DROPPED_HEADERS = frozenset({"host", "content-length", "transfer-encoding"})
"""Extra headers that would contradict the request's own framing or origin (ignored)."""
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""An HTTP header name (RFC 9110 token)."""


def header_value(what: str, value: Any) -> str:
    """``value`` as a header value: surrounding whitespace stripped (a key read from a file keeps
    its line end), then printable ASCII only, else a ``UserError`` naming ``what`` (never the
    value, which may be a key)."""
    if not isinstance(value, str):
        raise UserError(f"{what} must be a string, got {type(value).__name__}")
    text = value.strip()
    if any(c in text for c in "\r\n\0"):
        raise UserError(f"{what} contains a line break (CR or LF) or NUL; give it on one line")
    if not text.isascii() or not text.isprintable():
        raise UserError(f"{what} contains a control or non-ASCII character, which an HTTP header cannot carry")
    return text


def _endpoint(url: str) -> tuple[Any, bytes, bytes | None]:
    """The request URL for httpcore (scheme, host, port and a target percent-encoded as httpx
    encodes it: a space or ``é`` in the path goes out as ``%20`` or ``%C3%A9``), the ``Host``
    header, and the Basic-auth header of a ``user:password@`` (None without one). ``UserError``
    for a URL that is not ``http(s)://host[:port]/...``."""
    import httpcore

    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as e:
        raise UserError(f"api_base is not a valid URL: {e}") from None
    if parts.scheme not in ("http", "https") or not host or not host.isascii() or any(c in host for c in " \t\r\n\0"):
        raise UserError(f"api_base must be an http:// or https:// URL with a host, got {redact_url(url)!r}")
    target = quote(parts.path or "/", safe=_PATH_SAFE) + (f"?{quote(parts.query, safe=_QUERY_SAFE)}" if parts.query else "")
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != (443 if parts.scheme == "https" else 80):
        netloc += f":{port}"
    basic = None
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        basic = b"Basic " + base64.b64encode(pair.encode())
    return httpcore.URL(scheme=parts.scheme, host=host, port=port, target=target), netloc.encode(), basic


_PATH_SAFE = "/%!$&'()*+,;=:@~"
"""Characters a path keeps as they are (RFC 3986 pchar and ``/``; ``%`` keeps what is already
encoded); everything else is percent-encoded from UTF-8."""
_QUERY_SAFE = _PATH_SAFE + "?"


LANE_CONNECTIONS = 8
"""Connections per httpcore pool ("lane"). httpcore's pool walks all of its connections twice
per request, and for each idle one counts the idle ones again, under one lock: with 64
connections in one pool that walk was about a fifth of the transport's CPU per call; pools of
8 keep it short."""


class DirectTransport:
    """The connections of one endpoint, per process: an httpcore connection pool (httpx's
    transport layer; h11 reads and writes HTTP/1.1) shared by the threads that call
    ``complete_blocking``, each request sent and read by its calling thread within its deadline.

    At most ``max_connections`` connections, kept alive and reused; a request that fails or
    passes its deadline closes its connection. A proxy the environment names for the URL
    (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``; ``NO_PROXY`` honoured) carries every request.
    The key and extra headers are checked here, before any request (``header_value``)."""

    def __init__(self, api_base: str, api_key: str | None, extra_headers: dict[str, str] | None = None,
                 max_connections: int = MAX_CONCURRENCY, *, url_basic_auth: bool = False,
                 max_body_bytes: int = MAX_BODY_BYTES) -> None:
        # The user:password@ of an api_base is sent as Basic auth only when asked (url_basic_auth).
        self.url = (api_base if url_basic_auth else strip_userinfo(api_base)).rstrip("/") + "/chat/completions"
        self._target, host, basic = _endpoint(self.url)
        self._max_body_bytes = max_body_bytes
        self._max_connections = max(1, max_connections)
        # A local server needs no key, but send one as the OpenAI SDK does (OPENAI_API_KEY or a placeholder).
        key = header_value("api_key", api_key or os.environ.get("OPENAI_API_KEY") or "no-key")
        register_secret(key)
        headers = {"Authorization": basic.decode() if basic else f"Bearer {key}", "Content-Type": "application/json",
                   "Accept": "application/json", "Accept-Encoding": "gzip, deflate"}
        for name, value in (extra_headers or {}).items():
            if not isinstance(name, str) or not _TOKEN.fullmatch(name):
                raise UserError(f"extra_headers: {str(name)[:40]!r} is not a valid HTTP header name")
            if name.lower() not in _DROPPED_HEADERS:
                headers[name] = header_value(f"extra_headers[{name!r}]", value)
        self._header_map = headers
        self._head = [(b"Host", host), *((k.encode(), v.encode()) for k, v in headers.items())]
        self._lanes: list[Any] = []
        self._busy: list[float] = []
        self._share: list[float] = []
        self._backend: Any = None
        self._pid = 0
        self._lock = threading.Lock()
        self._tls: Any = None

    def _headers(self) -> dict[str, str]:
        """The headers every request carries (``Host`` aside)."""
        return dict(self._header_map)

    @property
    def opened(self) -> int:
        """Connections this process's pool has opened (for tests and diagnostics)."""
        return self._backend.opened if self._backend is not None and self._pid == os.getpid() else 0

    def _connections(self) -> list[Any]:
        """This process's pools ("lanes", made on first use; a forked child makes its own):
        ``max_connections`` split into pools of at most ``LANE_CONNECTIONS``."""
        if self._lanes and self._pid == os.getpid():
            return self._lanes
        import httpcore

        with self._lock:
            if not self._lanes or self._pid != os.getpid():
                proxy = env_proxy(self.url)
                self._backend = _deadline_backend()
                n = -(-self._max_connections // LANE_CONNECTIONS)
                sizes = [self._max_connections // n + (i < self._max_connections % n) for i in range(n)]
                self._lanes = [httpcore.ConnectionPool(
                    ssl_context=self._tls_context(), max_connections=size, max_keepalive_connections=size,
                    network_backend=self._backend, proxy=_proxy(proxy) if proxy else None) for size in sizes]
                self._busy = [0.0] * n
                self._share = [1.0 / size for size in sizes]
                self._pid = os.getpid()
        return self._lanes

    def _tls_context(self) -> Any:
        """The TLS context httpx would use (its CA bundle and ``SSL_CERT_FILE``), made once."""
        if self._tls is None:
            import httpx

            make = getattr(httpx, "create_ssl_context", None)
            self._tls = make() if make is not None else ssl.create_default_context()
        return self._tls

    def complete_blocking(self, body: bytes, headers: dict[str, str] | None, timeout_s: float) -> Any:
        """POST one chat request from the calling thread (``headers``: extra headers of this
        request only): the whole exchange, a free connection included, within ``timeout_s``
        seconds, else ``TimeoutError``. The parsed reply, or the exception its status or body
        calls for."""
        import httpcore

        limit = self._max_body_bytes or BODY_LIMIT.get() or MAX_BODY_BYTES
        sent = self._head + [(k.encode(), v.encode()) for k, v in headers.items()] if headers else self._head
        lanes = self._connections()
        with self._lock:  # the lane with the smallest share of its connections in use
            lane = min(range(len(lanes)), key=self._busy.__getitem__)
            self._busy[lane] += self._share[lane]
        pool = lanes[lane]
        token = _DEADLINE.set(time.monotonic() + timeout_s)
        timeouts = {"pool": timeout_s, "connect": timeout_s, "read": timeout_s, "write": timeout_s}
        try:
            with pool.stream(b"POST", self._target, headers=sent, content=body,
                             extensions={"timeout": timeouts}) as response:
                status = response.status
                fields: dict[str, str] = {}
                for k, v in response.headers:
                    key, val = k.decode("latin-1").lower(), v.decode("latin-1")
                    fields[key] = f"{fields[key]}, {val}" if key in fields else val
                raw = _read_bounded(response, fields, limit)
        except httpcore.TimeoutException:
            raise TimeoutError("no complete reply within the attempt's deadline") from None
        except httpcore.ConnectError as e:
            raise ConnectError(f"cannot connect to {self._head[0][1].decode()}: {_reason(e)}") from None
        finally:
            _DEADLINE.reset(token)
            with self._lock:
                self._busy[lane] -= self._share[lane]
        raw = _decode_bounded(raw, fields.get("content-encoding", ""), limit)
        if error_in_body(status, raw):
            status = 502
        if status >= 300:
            headers_out = {k: v for k, v in fields.items()
                           if k not in ("content-encoding", "content-length", "transfer-encoding")}
            raise http_error(status, raw, headers_out)
        return parse_reply(raw)

    def close(self) -> None:
        """Close this transport's idle connections (requests in flight close theirs when they end)."""
        if self._pid == os.getpid():
            for pool in self._lanes:
                pool.close()


def _read_bounded(response: Any, fields: dict[str, str], limit: int) -> bytes:
    """A reply's body, read into one buffer of at most ``limit`` bytes (``ReplyTooLarge`` beyond;
    an announced length over it is refused before reading). One buffer, not a list of pieces: a
    reply of millions of tiny chunks costs its size, not ~66 times it."""
    if "transfer-encoding" in fields and "content-length" in fields:
        # h11 lets Transfer-Encoding win, as RFC 9112 allows; RFC 9112 also says such a reply
        # "ought to be handled as an error" (a sign of response splitting), and it is here.
        import httpcore

        raise httpcore.RemoteProtocolError("reply with both Transfer-Encoding and Content-Length")
    announced = fields.get("content-length", "")
    if announced.isdigit() and int(announced) > limit:  # h11 has checked it is digits, and one value
        raise ReplyTooLarge(f"reply body larger than {limit} bytes")
    buf = bytearray()
    for chunk in response.iter_stream():
        buf += chunk
        if len(buf) > limit:
            raise ReplyTooLarge(f"reply body larger than {limit} bytes")
    return bytes(buf)


def _reason(e: BaseException) -> str:
    """The words of a connection failure, without the ``[Errno N]`` prefix."""
    cause = e.__cause__ or e.__context__
    cause = cause if isinstance(cause, OSError) else None
    return (cause.strerror if cause is not None and cause.strerror else str(e)) or type(e).__name__


def _proxy(url: str) -> Any:
    """An ``httpcore.Proxy`` for ``url``, its ``user:password@`` sent as Proxy-Authorization."""
    import httpcore

    parts = urlsplit(url)
    auth = None
    if parts.username is not None or parts.password is not None:
        auth = (unquote(parts.username or ""), unquote(parts.password or ""))
    return httpcore.Proxy(strip_userinfo(url), auth=auth)
