"""A lean HTTP/1.1 client for the direct transport: a keep-alive connection pool over asyncio
streams, for ``POST`` requests to one origin.

Why not httpx here: at 64 requests in flight, httpx's layers (request models, auth and redirect
flows, httpcore's pool walking every connection for every request, h11 and anyio wrappers) cost
about a quarter of the harness's CPU per model call. This pool does only what a chat request
needs: one origin (``http`` or ``https``), ``Content-Length`` request bodies, replies framed by
``Content-Length``, ``chunked`` or the connection's end, and keep-alive. The caller bounds each
request's total time (``asyncio.wait_for``); a cancelled or failed request closes its connection.

Each request can also run in the calling thread, on blocking sockets (``post_blocking``): a
runner's episode threads then send and read their own requests, with no hop to the event loop
and back (about a fifth of the interpreter lock's time per call at 64 in flight). Both ways read
a reply with the same parser (``_reply``), driven by an asyncio stream or by a socket.

What it does not do, and where httpx still serves (``openai_direct.DirectTransport`` decides):
proxies from the environment (``HTTP(S)_PROXY``, ``ALL_PROXY``) and Basic auth from a URL's
``user:password@``.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Generator
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

MAX_HEADER_LINE = 64 * 1024
"""Bytes of one status or header line (a longer one is a malformed reply)."""
MAX_HEADERS = 200
"""Header lines of one reply, at most."""


class ConnectionDropped(Exception):
    """The server closed the connection or broke the HTTP framing before a whole reply arrived
    (no status: the retry policy treats it as transient)."""


class ConnectError(OSError):
    """The origin could not be reached (refused, unknown host, unreachable network)."""


class BodyTooLarge(Exception):
    """A reply body over the caller's bound (raised before the rest of it is read)."""


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


def lean_eligible(url: str) -> bool:
    """True when the lean pool can serve ``url``: ``http``/``https`` with a host, no
    ``user:password@``, and no proxy from the environment for it (``env_proxy``)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return False
    return env_proxy(url) is None


class Reply:
    """A reply's status, headers (lower-case names; repeated ones joined by ", ") and body."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def reusable(self) -> bool:
        """An idle connection the server has not closed (its end arrives on the event loop)."""
        return not self.reader.at_eof() and not self.writer.is_closing() and not self.reader._buffer  # type: ignore[attr-defined]

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 - closing a broken transport must not raise
            pass


class Http1Pool:
    """At most ``max_connections`` keep-alive connections to the origin of ``url``, on the
    event loop that first uses the pool. Idle connections are reused most-recent first."""

    def __init__(self, url: str, max_connections: int, tls: Callable[[], ssl.SSLContext] | None = None) -> None:
        parts = urlsplit(url)
        self.scheme = parts.scheme
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.scheme == "https" else 80)
        default_port = parts.port is None or parts.port == (443 if self.scheme == "https" else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.max_connections = max(1, max_connections)
        self._tls_factory = tls
        self._tls: ssl.SSLContext | None = None
        self._idle: list[_Conn] = []
        self._slots: asyncio.Semaphore | None = None
        self._blocking: _BlockingState | None = None
        self.opened = 0
        """Connections opened so far (for tests and diagnostics)."""

    def _context(self) -> ssl.SSLContext | None:
        if self.scheme != "https":
            return None
        if self._tls is None:
            self._tls = self._tls_factory() if self._tls_factory else ssl.create_default_context()
        return self._tls

    async def _connect(self) -> _Conn:
        tls = self._context()
        try:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=tls, server_hostname=self.host if tls else None, limit=MAX_HEADER_LINE)
        except ssl.SSLError:
            raise  # a certificate or handshake failure keeps its own words
        except OSError as e:
            raise ConnectError(f"cannot connect to {self.host_header}: {e.strerror or e}") from None
        self.opened += 1
        return _Conn(reader, writer)

    async def post(self, body: bytes, headers: dict[str, str], limit: int) -> Reply:
        """``POST`` ``body`` with ``headers``; the reply with its body read within ``limit``
        bytes (``BodyTooLarge`` beyond). Raises ``ConnectionDropped`` or ``OSError`` when the
        exchange breaks."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_connections)
        async with self._slots:
            conn = None
            while self._idle:
                idle = self._idle.pop()
                if idle.reusable():
                    conn = idle
                    break
                idle.close()
            if conn is None:
                conn = await self._connect()
            keep = False
            try:
                reply, keep = await self._exchange(conn, body, headers, limit)
                return reply
            finally:
                if keep:
                    self._idle.append(conn)
                else:
                    conn.close()

    def _head(self, body: bytes, headers: dict[str, str]) -> bytes:
        lines = [f"POST {self.target} HTTP/1.1", f"Host: {self.host_header}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("host", "content-length")]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _exchange(self, conn: _Conn, body: bytes, headers: dict[str, str], limit: int) -> tuple[Reply, bool]:
        conn.writer.write(self._head(body, headers))
        conn.writer.write(body)
        await conn.writer.drain()
        reader = conn.reader
        parser = _reply(limit)
        want = next(parser)
        while True:
            try:
                want = parser.send(await _read(reader, want))
            except StopIteration as done:
                return done.value

    # --- the same requests from the calling thread, on blocking sockets -----------------------
    def post_blocking(self, body: bytes, headers: dict[str, str], limit: int, timeout_s: float) -> Reply:
        """``post`` in the calling thread: the whole exchange (waiting for a connection,
        connecting, sending, reading) within ``timeout_s`` seconds, else ``TimeoutError`` (the
        connection is then closed). Idle connections are shared by the calling threads."""
        deadline = time.monotonic() + timeout_s
        if self._blocking is None:
            with _CREATE_LOCK:
                if self._blocking is None:
                    self._blocking = _BlockingState(self.max_connections)
        state = self._blocking
        if not state.slots.acquire(timeout=max(0.0, timeout_s)):
            raise TimeoutError("no free connection within the deadline")
        try:
            sock = state.take_idle() or self._connect_blocking(deadline)
            keep = False
            try:
                reply, keep = self._exchange_blocking(sock, body, headers, limit, deadline)
                return reply
            finally:
                if keep:
                    state.put_idle(sock)
                else:
                    _close(sock)
        finally:
            state.slots.release()

    def _connect_blocking(self, deadline: float) -> socket.socket:
        tls = self._context()
        try:
            sock = socket.create_connection((self.host, self.port), timeout=_left(deadline))
        except TimeoutError:
            raise
        except OSError as e:
            raise ConnectError(f"cannot connect to {self.host_header}: {e.strerror or e}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio does
            if tls is not None:
                sock.settimeout(_left(deadline))
                sock = tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            _close(sock)
            raise
        with _CREATE_LOCK:
            self.opened += 1
        return sock

    def _exchange_blocking(
        self, sock: socket.socket, body: bytes, headers: dict[str, str], limit: int, deadline: float
    ) -> tuple[Reply, bool]:
        head = self._head(body, headers)
        sock.settimeout(_left(deadline))
        if len(body) < 65536:  # one segment; a large body is not copied to join them
            sock.sendall(head + body)
        else:
            sock.sendall(head)
            sock.settimeout(_left(deadline))
            sock.sendall(body)
        reader = _SocketReader(sock, deadline)
        parser = _reply(limit)
        want = next(parser)
        while True:
            try:
                want = parser.send(reader.read(want))
            except StopIteration as done:
                return done.value

    def close(self) -> None:
        """Close every idle connection (requests in flight close theirs when they end)."""
        while self._idle:
            self._idle.pop().close()
        if self._blocking is not None:
            self._blocking.close()


_LINE, _EXACT, _SOME = 0, 1, 2
"""What the reply parser asks its driver for: one line (through its ``\\n``), exactly N bytes,
or whatever comes next (``b""`` at the connection's end)."""

Want = tuple[int, int]


def _reply(limit: int) -> Generator[Want, bytes, tuple[Reply, bool]]:
    """The reply parser, free of I/O: it yields what it needs to read next, is sent those bytes,
    and returns (the reply, whether its connection may be reused). ``limit``: the body's bound."""
    while True:
        version, status = _status_line((yield _LINE, 0))
        fields = yield from _headers()
        if not 100 <= status < 200:
            break  # informational replies (100 Continue) precede the real one
    connection = fields.get("connection", "").lower()
    keep = (version == "HTTP/1.1" and "close" not in connection) or (
        version == "HTTP/1.0" and "keep-alive" in connection)
    if status in (204, 304):
        return Reply(status, fields, b""), keep
    if "chunked" in fields.get("transfer-encoding", "").lower():
        content = yield from _chunked(limit)
    elif "content-length" in fields:
        try:
            size = int(fields["content-length"].split(",")[0].strip())
        except ValueError:
            raise ConnectionDropped("reply with an invalid Content-Length") from None
        if size < 0:
            raise ConnectionDropped("reply with a negative Content-Length")
        if size > limit:
            raise BodyTooLarge(f"reply body larger than {limit} bytes")
        content = yield _EXACT, size
    else:  # framed by the connection's end
        chunks: list[bytes] = []
        total = 0
        while data := (yield _SOME, 0):
            total += len(data)
            if total > limit:
                raise BodyTooLarge(f"reply body larger than {limit} bytes")
            chunks.append(data)
        content, keep = b"".join(chunks), False
    return Reply(status, fields, content), keep


def _status_line(line: bytes) -> tuple[str, int]:
    parts = line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise ConnectionDropped("reply without an HTTP/1.x status line")
    return parts[0], int(parts[1])


def _headers() -> Generator[Want, bytes, dict[str, str]]:
    fields: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = yield _LINE, 0
        if line in (b"\r\n", b"\n"):
            return fields
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep or not name or name != name.strip():
            raise ConnectionDropped("reply with a malformed header line")
        key, val = name.lower(), value.strip()
        fields[key] = f"{fields[key]}, {val}" if key in fields else val
    raise ConnectionDropped(f"reply with more than {MAX_HEADERS} header lines")


def _chunked(limit: int) -> Generator[Want, bytes, bytes]:
    chunks: list[bytes] = []
    total = 0
    while True:
        head = (yield _LINE, 0).split(b";", 1)[0].strip()
        try:
            size = int(head, 16)
        except ValueError:
            raise ConnectionDropped("reply with a malformed chunk size") from None
        if size < 0:
            raise ConnectionDropped("reply with a malformed chunk size")
        if size == 0:
            for _ in range(MAX_HEADERS + 1):  # trailers, then the blank line
                if (yield _LINE, 0) in (b"\r\n", b"\n"):
                    return b"".join(chunks)
            raise ConnectionDropped("reply with too many trailer lines")
        total += size
        if total > limit:
            raise BodyTooLarge(f"reply body larger than {limit} bytes")
        chunks.append((yield _EXACT, size))
        if (yield _LINE, 0) not in (b"\r\n", b"\n"):
            raise ConnectionDropped("reply chunk not followed by a line end")


_CLOSED_EARLY = "server closed the connection before a whole reply"
_CLOSED_IN_BODY = "server closed the connection inside a reply body"
_LONG_LINE = f"reply header line longer than {MAX_HEADER_LINE} bytes"


async def _read(reader: asyncio.StreamReader, want: Want) -> bytes:
    """What the parser asked for, from an asyncio stream."""
    kind, size = want
    try:
        if kind == _LINE:
            return await reader.readuntil(b"\n")
        if kind == _EXACT:
            return await reader.readexactly(size)
        return await reader.read(65536)
    except asyncio.IncompleteReadError:
        raise ConnectionDropped(_CLOSED_EARLY if kind == _LINE else _CLOSED_IN_BODY) from None
    except asyncio.LimitOverrunError:
        raise ConnectionDropped(_LONG_LINE) from None


class _SocketReader:
    """What the parser asks for, from a blocking socket, each read within the deadline."""

    __slots__ = ("sock", "deadline", "buf")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()

    def _recv(self) -> bytes:
        self.sock.settimeout(_left(self.deadline))
        return self.sock.recv(65536)

    def read(self, want: Want) -> bytes:
        kind, size = want
        buf = self.buf
        if kind == _LINE:
            scanned = 0
            while (end := buf.find(b"\n", scanned)) < 0:
                if len(buf) > MAX_HEADER_LINE:
                    raise ConnectionDropped(_LONG_LINE)
                scanned = len(buf)
                data = self._recv()
                if not data:
                    raise ConnectionDropped(_CLOSED_EARLY)
                buf += data
            if end >= MAX_HEADER_LINE:
                raise ConnectionDropped(_LONG_LINE)
            line = bytes(buf[: end + 1])
            del buf[: end + 1]
            return line
        if kind == _EXACT:
            while len(buf) < size:
                data = self._recv()
                if not data:
                    raise ConnectionDropped(_CLOSED_IN_BODY)
                buf += data
            out = bytes(buf[:size])
            del buf[:size]
            return out
        if buf:
            out = bytes(buf)
            buf.clear()
            return out
        return self._recv()


def _left(deadline: float) -> float:
    """Seconds left before ``deadline``; ``TimeoutError`` once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's deadline passed")
    return left


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


_CREATE_LOCK = threading.Lock()


def _alive(sock: socket.socket) -> bool:
    """Whether an idle connection may carry the next request: nothing to read on it (readable
    means the server closed it, or sent a stray byte). On TLS, records that carry no data (a
    TLS 1.3 session ticket arriving late) leave it alive."""
    try:
        if not select.select([sock], [], [], 0)[0]:
            return True
        if not isinstance(sock, ssl.SSLSocket) or sock.pending():
            return False
        sock.settimeout(0)
        sock.recv(1)  # a byte of data, or the connection's end: either way not reusable
        return False
    except ssl.SSLWantReadError:
        return True  # only protocol records were waiting
    except (OSError, ValueError):
        return False


class _BlockingState:
    """The blocking side of a pool: its connection cap and idle sockets, shared by threads."""

    def __init__(self, max_connections: int) -> None:
        self.slots = threading.BoundedSemaphore(max_connections)
        self.idle: list[socket.socket] = []
        self.lock = threading.Lock()

    def take_idle(self) -> socket.socket | None:
        """The most recently used idle connection the server has not closed, or None."""
        while True:
            with self.lock:
                if not self.idle:
                    return None
                sock = self.idle.pop()
            if _alive(sock):
                return sock
            _close(sock)

    def put_idle(self, sock: socket.socket) -> None:
        with self.lock:
            self.idle.append(sock)

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for sock in idle:
            _close(sock)
