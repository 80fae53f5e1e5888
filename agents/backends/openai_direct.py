"""The direct OpenAI-compatible transport: ``POST {api_base}/chat/completions`` over a lean
keep-alive HTTP/1.1 pool per backend (``agents.backends.http1``), for ``openai/<name>`` models
served at an ``api_base`` (vLLM, SGLang, the local test server) and the providers of
``agents.backends.providers``. Behind a proxy named by the environment (``HTTP_PROXY``,
``HTTPS_PROXY``, ``ALL_PROXY``, honouring ``NO_PROXY``) or with Basic auth from the URL, requests
go through pooled ``httpx.AsyncClient`` lanes instead, through that proxy.

It sends the body litellm sends for such a model (the name after ``openai/``, the messages,
temperature, max_tokens, tools, the reasoning parameters and any extra parameters) and raises the
errors the retry policy of ``litellm_backend`` classifies: an HTTP error status arrives as an
exception named like litellm's (``RateLimitError``, ``AuthenticationError``,
``ContextWindowExceededError``, ...) carrying ``status_code`` and the response headers (for
``Retry-After``). It never imports litellm: no import seconds, no per-call request building,
logging or cost-map lookups. Replies are untrusted: a body that is not the chat-completion shape
raises ``MalformedReply``, which the retry policy treats as transient.

Bodies are read within bounds on both paths (``BoundedTransport`` for httpx): at most ``max_body_bytes`` on the wire and at most
``max_body_bytes`` once decompressed (gzip or deflate, decoded here in bounded steps, so a small
compressed bomb cannot fill memory), and a 2xx body that carries an ``error`` object instead of
``choices`` is turned into an HTTP 502 (the litellm transport gets the same treatment, so both
classify it alike). Error bodies are masked whole (``countgym.secrets``) before they are cut.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import threading
import zlib
from contextvars import ContextVar
from types import SimpleNamespace
from typing import Any

from countgym.agents.backends.http1 import BodyTooLarge, Http1Pool, env_proxy, lean_eligible
from countgym.limits import MAX_CONCURRENCY
from countgym.secrets import scrub_text, strip_userinfo

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
    text = json.dumps(body, separators=(",", ":"))
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
            return json.dumps(body, separators=(",", ":")).encode()
        pieces += [before.encode(), b'"', url.encode("ascii"), b'"']
    pieces.append(text.encode())
    return b"".join(pieces)


_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
_SPLICE_MIN = 4096
"""Data URLs shorter than this are left to the JSON encoder."""


def json_safe_data_url(url: Any) -> bool:
    """Whether ``url`` is a base64 data URL whose JSON string is its own text (nothing to escape):
    an ASCII ``data:<type>;base64,`` head without quotes, backslashes or control characters, then
    only base64 characters."""
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


LANE_CONNECTIONS = 8
"""Connections per pooled client ("lane"). httpcore's pool walks every connection of its client
for every queued request (quadratic in the pool's size), so 64 requests in flight on one client
spent more CPU on the event loop assigning connections than on sending them; several small
clients keep that walk short."""


class DirectTransport:
    """The connections of one endpoint, per process, created on the event loop they serve.

    Requests go through the lean HTTP/1.1 pool (``agents.backends.http1``) when it serves the URL
    as httpx would (``lean=None``: no proxy from the environment applies, no ``user:password@``);
    else through pooled ``httpx.AsyncClient`` lanes. A request goes to the first lane with a free connection (fewer requests in flight than its
    size, at most ``LANE_CONNECTIONS``); a new lane opens when every lane is full; once
    ``max_connections`` connections are open, requests queue on the least busy lane."""

    def __init__(self, api_base: str, api_key: str | None, extra_headers: dict[str, str] | None = None,
                 max_connections: int = MAX_CONCURRENCY, *, url_basic_auth: bool = False,
                 max_body_bytes: int = MAX_BODY_BYTES, lean: bool | None = None) -> None:
        # The user:password@ of an api_base is sent as Basic auth only when asked (url_basic_auth).
        self.url = (api_base if url_basic_auth else strip_userinfo(api_base)).rstrip("/") + "/chat/completions"
        self._max_body_bytes = max_body_bytes
        self._api_key = api_key
        self._extra_headers = dict(extra_headers or {})
        self._max_connections = max_connections
        self._lanes: list[Any] = []
        self._busy: list[int] = []
        self._size: list[int] = []
        self._tls: Any = None
        self._pid = 0
        self._lean = lean
        self._pool: Http1Pool | None = None
        self._pool_loop: Any = None
        self._blocking_pool: Http1Pool | None = None
        self._blocking_pid = 0
        self._blocking_lock = threading.Lock()

    def _headers(self) -> dict[str, str]:
        # A local server needs no key, but send one as the OpenAI SDK does (OPENAI_API_KEY or a placeholder).
        key = self._api_key or os.environ.get("OPENAI_API_KEY") or "no-key"
        return {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                "Accept": "application/json", "Accept-Encoding": "gzip, deflate", **self._extra_headers}

    def _lane(self) -> int:
        """The index of the lane for the next request (on the loop's thread, so no lock)."""
        if self._pid != os.getpid():  # a forked child starts with no clients of its own
            self._lanes, self._busy, self._size, self._tls, self._pid = [], [], [], None, os.getpid()
        for i, busy in enumerate(self._busy):
            if busy < self._size[i]:  # the first lane with a free connection: idle ones are reused
                return i
        room = self._max_connections - sum(self._size)
        if self._lanes and room <= 0:
            # Every connection is busy: queue on the lane with the fewest requests per connection.
            return min(range(len(self._lanes)), key=lambda i: self._busy[i] / self._size[i])
        size = max(1, min(LANE_CONNECTIONS, room))
        self._lanes.append(self._new_client(size))
        self._busy.append(0)
        self._size.append(size)
        return len(self._lanes) - 1

    def _new_client(self, connections: int) -> Any:
        import httpx

        if self._tls is None:
            # One TLS context for every lane (loading the CA bundle costs tens of milliseconds each).
            make = getattr(httpx, "create_ssl_context", None)
            self._tls = make() if make is not None else True
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        # A transport of our own makes httpx skip the proxy variables, so they are applied here.
        inner = httpx.AsyncHTTPTransport(limits=limits, verify=self._tls, proxy=env_proxy(self.url))
        # No httpx timeouts: the caller's total deadline (asyncio.wait_for) bounds each attempt.
        return httpx.AsyncClient(transport=bounded_transport(inner, self._max_body_bytes),
                                 timeout=httpx.Timeout(None))

    async def complete(self, body: bytes, headers: dict[str, str] | None = None) -> Any:
        """POST one chat request (``headers``: extra headers of this request only); the parsed
        reply, or the exception its status or body calls for."""
        if self._lean is None:
            self._lean = lean_eligible(self.url)
        if self._lean:
            return await self._complete_lean(body, headers)
        i = self._lane()
        self._busy[i] += 1
        sent = {**self._headers(), **headers} if headers else self._headers()
        try:
            response = await self._lanes[i].post(self.url, content=body, headers=sent)
        finally:
            self._busy[i] -= 1
        raw = response.content
        if response.status_code >= 300:
            raise http_error(response.status_code, raw, dict(response.headers))
        return parse_reply(raw)

    def _lean_pool(self) -> Http1Pool:
        """This process's and event loop's keep-alive pool (a fork or another loop starts afresh)."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop or self._pid != os.getpid():
            self._pool = Http1Pool(self.url, self._max_connections, tls=self._tls_context)
            self._pool_loop, self._pid = loop, os.getpid()
        return self._pool

    def _tls_context(self) -> Any:
        """The TLS context httpx would use (its CA bundle and ``SSL_CERT_FILE``), made once."""
        if self._tls is None or self._tls is True:
            import httpx

            make = getattr(httpx, "create_ssl_context", None)
            self._tls = make() if make is not None else ssl.create_default_context()
        return self._tls

    async def _complete_lean(self, body: bytes, headers: dict[str, str] | None) -> Any:
        limit = self._max_body_bytes or BODY_LIMIT.get() or MAX_BODY_BYTES
        sent = {**self._headers(), **headers} if headers else self._headers()
        try:
            reply = await self._lean_pool().post(body, sent, limit)
        except BodyTooLarge as e:
            raise ReplyTooLarge(str(e)) from None
        return self._lean_reply(reply, limit)

    def blocking(self) -> bool:
        """Whether ``complete_blocking`` serves this endpoint (the lean pool does; httpx lanes,
        behind a proxy or with Basic auth from the URL, run on the event loop)."""
        if self._lean is None:
            self._lean = lean_eligible(self.url)
        return self._lean

    def complete_blocking(self, body: bytes, headers: dict[str, str] | None, timeout_s: float) -> Any:
        """``complete`` in the calling thread, on the lean pool's blocking sockets: the whole
        exchange within ``timeout_s`` seconds, else ``TimeoutError``. Only where ``blocking()``."""
        limit = self._max_body_bytes or BODY_LIMIT.get() or MAX_BODY_BYTES
        sent = {**self._headers(), **headers} if headers else self._headers()
        pool = self._blocking_pool
        if pool is None or self._blocking_pid != os.getpid():
            with self._blocking_lock:
                # Threads share one pool; a forked child starts with connections of its own.
                if self._blocking_pool is None or self._blocking_pid != os.getpid():
                    self._blocking_pool = Http1Pool(self.url, self._max_connections, tls=self._tls_context)
                    self._blocking_pid = os.getpid()
                pool = self._blocking_pool
        try:
            reply = pool.post_blocking(body, sent, limit, timeout_s)
        except BodyTooLarge as e:
            raise ReplyTooLarge(str(e)) from None
        return self._lean_reply(reply, limit)

    def _lean_reply(self, reply: Any, limit: int) -> Any:
        """The parsed reply of the lean pool, or the exception its status or body calls for."""
        raw = _decode_bounded(reply.content, reply.headers.get("content-encoding", ""), limit)
        status = 502 if error_in_body(reply.status_code, raw) else reply.status_code
        if status >= 300:
            headers_out = {k: v for k, v in reply.headers.items()
                           if k not in ("content-encoding", "content-length", "transfer-encoding")}
            raise http_error(status, raw, headers_out)
        return parse_reply(raw)

    async def aclose(self) -> None:
        """Close this transport's idle connections and httpx lanes."""
        if self._pool is not None:
            self._pool.close()
        if self._blocking_pool is not None:
            self._blocking_pool.close()
        for lane in self._lanes:
            await lane.aclose()
