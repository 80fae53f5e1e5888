"""The lean HTTP/1.1 pool of the direct transport, against a scripted server: every framing a
server may use (Content-Length, chunked with extensions and trailers, the connection's end),
informational replies, keep-alive and its end, bodies over the bound refused before they are
read, broken replies as retryable errors, a cancelled request closing its connection, TLS, and
the hand-over to httpx behind a proxy. The framing tests run both ways a request can go: on the
event loop (``post``) and from the calling thread on blocking sockets (``post_blocking``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from countgym.agents.backends.http1 import (
    BodyTooLarge,
    ConnectionDropped,
    Http1Pool,
    lean_eligible,
)

OK_BODY = json.dumps({"choices": [{"message": {"content": "ANSWER: 4"}, "finish_reason": "stop"}]}).encode()
Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> tuple[list[str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    length = next(int(h.split(":", 1)[1]) for h in head if h.lower().startswith("content-length:"))
    return head, await reader.readexactly(length)


def _ok(body: bytes = OK_BODY, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


async def _with_server(script: Script, go: Callable[[str], Awaitable[Any]], *, tls: ssl.SSLContext | None = None) -> Any:
    """Serve ``script`` (called per request with the connection's request number) on 127.0.0.1
    and run ``go(url)`` against it."""
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            n = 0
            while not reader.at_eof():
                try:
                    await script(reader, writer, n)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                n += 1
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        async with server:
            return await go(f"{'https' if tls else 'http'}://127.0.0.1:{port}/v1/chat/completions")
    finally:
        server.close()


def _run(script: Script, go: Callable[[str], Awaitable[Any]], **kw: Any) -> Any:
    return asyncio.run(asyncio.wait_for(_with_server(script, go, **kw), 20))


MODE = "loop"
"""How ``_post`` sends: "loop" (``Http1Pool.post``) or "blocking" (``post_blocking`` in a thread)."""
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer k"}


@pytest.fixture(params=["loop", "blocking"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(sys.modules[__name__], "MODE", request.param)
    return str(request.param)


async def _post(pool: Http1Pool, body: bytes = b'{"x": 1}', limit: int = 1 << 20) -> Any:
    if MODE == "blocking":
        return await asyncio.to_thread(pool.post_blocking, body, HEADERS, limit, 15.0)
    return await pool.post(body, HEADERS, limit)


def _idle(pool: Http1Pool) -> list[Any]:
    """The pool's idle connections, both ways."""
    return [*pool._idle, *(pool._blocking.idle if pool._blocking is not None else [])]


def test_a_request_goes_out_as_http_1_1_with_its_headers_and_body(mode: str) -> None:
    seen: list[tuple[list[str], bytes]] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        seen.append(await _read_request(reader))
        writer.write(_ok())

    async def go(url: str) -> Any:
        pool = Http1Pool(url, 4)
        return await _post(pool, b'{"model": "m"}')

    reply = _run(script, go)
    assert reply.status_code == 200 and reply.content == OK_BODY
    assert reply.headers["content-type"] == "application/json"
    head, body = seen[0]
    assert head[0] == "POST /v1/chat/completions HTTP/1.1"
    assert head[1].startswith("Host: 127.0.0.1:") and "Content-Length: 14" in head
    assert "Authorization: Bearer k" in head and body == b'{"model": "m"}'


def test_chunked_replies_with_extensions_and_trailers_keep_the_connection(mode: str) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        half = len(OK_BODY) // 2
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + f"{half:x};ext=1\r\n".encode() + OK_BODY[:half] + b"\r\n"
                     + f"{len(OK_BODY) - half:X}\r\n".encode() + OK_BODY[half:] + b"\r\n"
                     + b"0\r\nX-Trailer: yes\r\n\r\n")

    async def go(url: str) -> Any:
        pool = Http1Pool(url, 4)
        replies = [await _post(pool), await _post(pool)]
        return pool, replies

    pool, replies = _run(script, go)
    assert [r.content for r in replies] == [OK_BODY, OK_BODY]
    assert pool.opened == 1  # kept alive across both


def test_a_reply_framed_by_the_connection_end_closes_it(mode: str) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + OK_BODY)
        await writer.drain()
        writer.close()

    async def go(url: str) -> Any:
        pool = Http1Pool(url, 4)
        replies = [await _post(pool), await _post(pool)]
        return pool, replies

    pool, replies = _run(script, go)
    assert [r.content for r in replies] == [OK_BODY, OK_BODY] and pool.opened == 2


@pytest.mark.parametrize("first", [
    _ok(extra="Connection: close\r\n"),
    b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(OK_BODY), OK_BODY),
])
def test_connection_close_and_http_1_0_are_not_reused(first: bytes, mode: str) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        writer.write(first)

    async def go(url: str) -> Any:
        pool = Http1Pool(url, 4)
        replies = [await _post(pool), await _post(pool)]
        return pool, replies

    pool, replies = _run(script, go)
    assert [r.content for r in replies] == [OK_BODY, OK_BODY] and pool.opened == 2


def test_informational_replies_are_skipped(mode: str) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + _ok())

    reply = _run(script, lambda url: _post(Http1Pool(url, 1)))
    assert reply.status_code == 200 and reply.content == OK_BODY


def test_an_idle_connection_the_server_closed_is_not_reused(mode: str) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        writer.write(_ok())  # says keep-alive, then the server's idle timeout closes it
        await writer.drain()
        writer.close()

    async def go(url: str) -> Any:
        pool = Http1Pool(url, 1)
        first = await _post(pool)
        await asyncio.sleep(0.2)  # the server's close reaches the pool's idle connection
        second = await _post(pool)
        return pool, first, second

    pool, first, second = _run(script, go)
    assert first.content == second.content == OK_BODY and pool.opened == 2


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",  # announced: refused before reading
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4000\r\n" + b"x" * 0x4000 + b"\r\n4000\r\n",
])
def test_a_body_over_the_bound_is_refused_without_reading_it(reply: bytes, mode: str) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        writer.write(reply)
        await asyncio.sleep(30)  # the rest never comes: reading on would hang the test

    async def go(url: str) -> Any:
        pool = Http1Pool(url, 1)
        with pytest.raises(BodyTooLarge, match="larger than 20000 bytes"):
            await _post(pool, limit=20000)
        return pool

    pool = _run(script, go)
    assert _idle(pool) == []  # the connection was closed, not kept


@pytest.mark.parametrize("reply,match", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"cho", "inside a reply body"),
    (b"", "before a whole reply"),
    (b"SSH-2.0-OpenSSH\r\n\r\n", "status line"),
    (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", "longer than"),
    (b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n", "malformed header"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "invalid Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
    (b"HTTP/1.1 200 OK\r\n" + b"X-A: 1\r\n" * 300 + b"\r\n", "more than 200 header lines"),
])
def test_broken_replies_are_dropped_connections(reply: bytes, match: str, mode: str) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        writer.write(reply)
        await writer.drain()
        writer.close()

    async def go(url: str) -> None:
        with pytest.raises(ConnectionDropped, match=match):
            await _post(Http1Pool(url, 1))

    _run(script, go)


def test_a_cancelled_request_closes_its_connection_and_frees_its_slot() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        _, body = await _read_request(reader)
        if body == b"hang":
            await asyncio.sleep(30)
        writer.write(_ok())

    async def go(url: str) -> Any:
        pool = Http1Pool(url, 1)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(_post(pool, b"hang"), 0.3)
        reply = await asyncio.wait_for(_post(pool), 5)  # the one slot is free again
        return pool, reply

    pool, reply = _run(script, go)
    assert reply.content == OK_BODY and pool.opened == 2


def test_requests_beyond_the_connections_wait_their_turn_and_reuse_them(mode: str) -> None:
    in_flight = peak = 0

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        nonlocal in_flight, peak
        await _read_request(reader)
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.05)
        in_flight -= 1
        writer.write(_ok())

    async def go(url: str) -> Any:
        pool = Http1Pool(url, 3)
        replies = await asyncio.gather(*(_post(pool) for _ in range(12)))
        return pool, replies

    pool, replies = _run(script, go)
    assert len(replies) == 12 and all(r.content == OK_BODY for r in replies)
    assert peak == 3 and pool.opened == 3 and len(_idle(pool)) == 3
    pool.close()
    assert _idle(pool) == []


def test_lean_eligibility_follows_the_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    assert lean_eligible("http://127.0.0.1:8000/v1/chat/completions")
    assert lean_eligible("https://api.example.com/v1/chat/completions")
    assert not lean_eligible("http://user:pw@127.0.0.1:8000/v1/chat/completions")
    assert not lean_eligible("ftp://127.0.0.1/v1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert not lean_eligible("https://api.example.com/v1/chat/completions")
    assert lean_eligible("http://127.0.0.1:8000/v1/chat/completions")  # no proxy for http
    monkeypatch.setenv("ALL_PROXY", "http://proxy.example:3128")
    assert not lean_eligible("http://127.0.0.1:8000/v1/chat/completions")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    assert lean_eligible("http://127.0.0.1:8000/v1/chat/completions")


def test_behind_a_proxy_the_direct_transport_goes_through_httpx_and_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy from the environment is honoured: the request reaches the proxy in absolute form."""
    from countgym.agents.backends.openai_direct import DirectTransport

    lines: list[str] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        head, _ = await _read_request(reader)
        lines.append(head[0])
        writer.write(_ok())

    async def go(proxy_url: str) -> Any:
        origin = proxy_url.split("/v1/")[0]
        for var in ("NO_PROXY", "no_proxy", "http_proxy", "all_proxy", "ALL_PROXY"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HTTP_PROXY", origin)
        transport = DirectTransport("http://model.invalid/v1", "sk-x")
        reply = await transport.complete(b'{"model": "m", "messages": []}')
        await transport.aclose()
        return transport, reply

    transport, reply = _run(proxy, go)
    assert transport._lean is False and reply.choices[0].message.content == "ANSWER: 4"
    assert lines == ["POST http://model.invalid/v1/chat/completions HTTP/1.1"]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_https_through_the_lean_pool_verifies_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from countgym.agents.backends.openai_direct import DirectTransport

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await _read_request(reader)
        writer.write(_ok())

    async def go(url: str) -> Any:
        base = url.rsplit("/chat/completions", 1)[0]
        for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(var, raising=False)
        untrusted = DirectTransport(base, "sk-x")
        with pytest.raises(ssl.SSLCertVerificationError):
            await untrusted.complete(b"{}")
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trusted as httpx would trust it
        trusted = DirectTransport(base, "sk-x")
        reply = await trusted.complete(b"{}")
        # From the calling thread, the same verification.
        monkeypatch.delenv("SSL_CERT_FILE")
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.to_thread(DirectTransport(base, "sk-x").complete_blocking, b"{}", None, 10.0)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        kept = DirectTransport(base, "sk-x")
        for _ in range(3):
            blocking = await asyncio.to_thread(kept.complete_blocking, b"{}", None, 10.0)
            assert blocking.choices[0].message.content == "ANSWER: 4"
            await asyncio.sleep(0.05)  # late TLS records (session tickets) reach the idle connection
        assert kept._blocking_pool is not None and kept._blocking_pool.opened == 1  # kept alive over TLS
        return trusted, reply

    transport, reply = _run(script, go, tls=server_tls)
    assert transport._lean is True and reply.choices[0].message.content == "ANSWER: 4"


def test_behind_a_proxy_the_litellm_transport_goes_through_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm's session (made by countgym, for bounded reads) honours the proxy variables too."""
    pytest.importorskip("litellm")
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from countgym.agents.backends.base import message, text_part
    from countgym.agents.backends.litellm_backend import LiteLLMBackend

    lines: list[str] = []

    class Proxy(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            lines.append(self.requestline)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(OK_BODY)))
            self.end_headers()
            self.wfile.write(OK_BODY)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        for var in ("NO_PROXY", "no_proxy", "http_proxy", "all_proxy", "ALL_PROXY"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{httpd.server_address[1]}")
        be = LiteLLMBackend("openai/blob", api_base="http://model.invalid/v1", transport="litellm", api_key="sk-x",
                            max_attempts=1)
        reply = be.complete([message("user", text_part("How many?"))])
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert reply.error is None and reply.text == "ANSWER: 4"
    assert lines == ["POST http://model.invalid/v1/chat/completions HTTP/1.1"]


def test_an_unreachable_origin_is_one_clear_retryable_line() -> None:
    import socket

    from countgym.agents.backends.base import message, text_part
    from countgym.agents.backends.litellm_backend import LiteLLMBackend
    from countgym.errors import is_transient_error

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    be = LiteLLMBackend("openai/blob", api_base=f"http://127.0.0.1:{port}/v1", max_attempts=2, backoff_base_s=0.01,
                        sleep=lambda s: None)
    err = be.complete([message("user", text_part("hi"))]).error
    assert err is not None and is_transient_error(err) and "\n" not in err
    assert f"gave up after 2 attempt(s), 0.0 s of backoff: ConnectError: cannot connect to 127.0.0.1:{port}: " in err


def test_a_blocking_request_past_its_deadline_is_a_timeout_and_closes_its_connection() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        _, body = await _read_request(reader)
        if body == b"hang":
            await asyncio.sleep(30)
        elif body == b"trickle":  # a byte at a time: each read is quick, the whole reply is not
            for byte in _ok():
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.05)
        writer.write(_ok())

    async def go(url: str) -> Any:
        pool = Http1Pool(url, 1)
        spent = []
        for body in (b"hang", b"trickle"):
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                await asyncio.to_thread(pool.post_blocking, body, HEADERS, 1 << 20, 0.4)
            spent.append(time.monotonic() - t0)
        reply = await asyncio.to_thread(pool.post_blocking, b"{}", HEADERS, 1 << 20, 5.0)  # the slot is free
        return pool, reply, spent

    pool, reply, spent = _run(script, go)
    assert reply.content == OK_BODY and pool.opened == 3  # neither timed-out connection was kept
    assert all(0.35 < s < 3 for s in spent), spent


def test_the_direct_backend_sends_from_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """An episode's thread sends its own request: the event loop's pool is never used."""
    from countgym.agents.backends.base import message, text_part
    from countgym.agents.backends.litellm_backend import LiteLLMBackend
    from countgym.testing.server import TestServer

    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the event loop's pool was used")

    monkeypatch.setattr(Http1Pool, "post", refuse)
    with TestServer() as srv:
        be = LiteLLMBackend("openai/blob", api_base=srv.base_url, max_attempts=1)
        replies = [be.complete([message("user", text_part("How many dots? ANSWER: N"))]) for _ in range(3)]
    assert all(r.error is None and r.text for r in replies)
    assert be._direct is not None and be._direct._blocking_pool is not None
    assert be._direct._blocking_pool.opened == 1  # kept alive across the calls
