"""The direct transport's HTTP, against a server on raw sockets (127.0.0.1) that writes every
reply byte for byte: each framing a server may use, keep-alive and its end, the body bound (an
announced length and a stream of tiny chunks), malformed framings refused by the library (h11)
as retryable protocol errors, the attempt's deadline, TLS, a proxy from the environment, and
configuration that cannot go on the wire (a key or header with a line break, NUL or non-ASCII
character; a NaN parameter) refused before the first request."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpcore
import pytest

from countgym.agents.backends.base import message, text_part
from countgym.agents.backends.litellm_backend import LiteLLMBackend
from countgym.agents.backends.openai_direct import (
    ConnectError,
    DirectTransport,
    ReplyTooLarge,
    _read_bounded,
)
from countgym.cli import main
from countgym.errors import UserError, is_transient_error

OK_BODY = json.dumps({"choices": [{"message": {"content": "ANSWER: 4"}, "finish_reason": "stop"}]}).encode()
Handler = Callable[[socket.socket, list[str], bytes], bool]
"""Answers one request (its head lines and body) on a connection; False closes the connection."""


def _ok(body: bytes = OK_BODY, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def _reply(raw: bytes) -> Handler:
    """A handler that writes ``raw`` and keeps the connection."""
    def handle(conn: socket.socket, head: list[str], body: bytes) -> bool:
        conn.sendall(raw)
        return True
    return handle


class RawServer:
    """A listening socket on 127.0.0.1: each connection in a thread of its own, each request on
    it read whole (head, then a Content-Length body) and handed to ``handle``."""

    def __init__(self, handle: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handle = handle
        self.tls = tls
        self.requests: list[tuple[list[str], bytes]] = []
        self.connections = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/v1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
                self._open.append(conn)
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head_bytes, buf = buf.split(b"\r\n\r\n", 1)
                head = head_bytes.decode("latin-1").split("\r\n")
                size = next((int(h.split(":", 1)[1]) for h in head if h.lower().startswith("content-length:")), 0)
                while len(buf) < size:
                    buf += conn.recv(65536)
                body, buf = buf[:size], buf[size:]
                self.requests.append((head, body))
                if not self.handle(conn, head, body):
                    return
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._sock.close()
        for conn in self._open:
            try:
                conn.close()
            except OSError:
                pass


@contextmanager
def serving(handle: Handler, tls: ssl.SSLContext | None = None) -> Iterator[RawServer]:
    srv = RawServer(handle, tls)
    try:
        yield srv
    finally:
        srv.close()


def _post(t: DirectTransport, body: bytes = b'{"x": 1}', timeout_s: float = 10.0) -> Any:
    return t.complete_blocking(body, None, timeout_s)


def _text(reply: Any) -> str:
    return str(reply.choices[0].message.content)


# --- requests and framings --------------------------------------------------------------------------
def test_a_request_goes_out_as_http_1_1_with_its_headers_and_body() -> None:
    with serving(_reply(_ok())) as srv:
        reply = _post(DirectTransport(srv.base, "sk-abc", {"X-Team": "vision"}), b'{"model": "m"}')
    head, body = srv.requests[0]
    assert _text(reply) == "ANSWER: 4" and body == b'{"model": "m"}'
    assert head[0] == "POST /v1/chat/completions HTTP/1.1"
    assert f"Host: 127.0.0.1:{srv.port}" in head and "Content-Length: 14" in head
    assert "Authorization: Bearer sk-abc" in head and "X-Team: vision" in head


def test_chunked_replies_with_extensions_and_trailers_keep_the_connection() -> None:
    half = len(OK_BODY) // 2
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               + f"{half:x};ext=1\r\n".encode() + OK_BODY[:half] + b"\r\n"
               + f"{len(OK_BODY) - half:X}\r\n".encode() + OK_BODY[half:] + b"\r\n"
               + b"0\r\nX-Trailer: yes\r\n\r\n")
    with serving(_reply(chunked)) as srv:
        t = DirectTransport(srv.base, "k")
        replies = [_post(t), _post(t)]
    assert [_text(r) for r in replies] == ["ANSWER: 4"] * 2
    assert t.opened == 1 == srv.connections  # kept alive across both


def _then_close(raw: bytes) -> Handler:
    def handle(conn: socket.socket, head: list[str], body: bytes) -> bool:
        conn.sendall(raw)
        return False
    return handle


@pytest.mark.parametrize("handle", [
    _then_close(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + OK_BODY),  # framed by the end
    _reply(_ok(extra="Connection: close\r\n")),
    _reply(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(OK_BODY), OK_BODY)),
], ids=["connection-end", "connection-close", "http-1.0"])
def test_replies_that_end_their_connection_are_read_and_not_reused(handle: Handler) -> None:
    with serving(handle) as srv:
        t = DirectTransport(srv.base, "k")
        replies = [_post(t), _post(t)]
    assert [_text(r) for r in replies] == ["ANSWER: 4"] * 2 and t.opened == 2


def test_informational_replies_are_skipped() -> None:
    with serving(_reply(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + _ok())) as srv:
        assert _text(_post(DirectTransport(srv.base, "k"))) == "ANSWER: 4"


def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    with serving(_then_close(_ok())) as srv:  # says keep-alive, then its idle timeout closes it
        t = DirectTransport(srv.base, "k")
        first = _post(t)
        time.sleep(0.2)  # the server's close reaches the idle connection
        second = _post(t)
    assert _text(first) == _text(second) == "ANSWER: 4" and t.opened == 2


# --- the body bound ---------------------------------------------------------------------------------
def _hang_after(raw: bytes) -> Handler:
    def handle(conn: socket.socket, head: list[str], body: bytes) -> bool:
        conn.sendall(raw)
        time.sleep(30)  # the rest never comes: reading on would hang the test
        return False
    return handle


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",  # announced: refused before reading
    # Chunks past the bound, and the rest never comes: refused once the bound is passed.
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"4000\r\n" + b"x" * 0x4000 + b"\r\n") * 2,
], ids=["announced", "chunked"])
def test_a_body_over_the_bound_is_refused_without_reading_it_and_its_connection_closed(raw: bytes) -> None:
    with serving(_hang_after(raw)) as srv:
        t = DirectTransport(srv.base, "k", max_body_bytes=20000)
        t0 = time.monotonic()
        with pytest.raises(ReplyTooLarge, match="larger than 20000 bytes"):
            _post(t)
        assert time.monotonic() - t0 < 5
        assert all(pool.connections == [] for pool in t._connections())  # closed, not kept


def test_a_reply_of_many_tiny_chunks_arrives_whole() -> None:
    body = OK_BODY + b" " * 20000  # JSON allows the trailing blanks
    pieces = [body[i:i + 2] for i in range(0, len(body), 2)]
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(
        b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    with serving(_reply(chunked)) as srv:
        assert _text(_post(DirectTransport(srv.base, "k"))) == "ANSWER: 4"


class _Chunks:
    def __init__(self, n: int) -> None:
        self.n = n

    def iter_stream(self) -> Iterator[bytes]:
        for i in range(self.n):
            yield bytes((65 + i % 26, 66))  # a new two-byte object each time


def test_many_tiny_chunks_cost_their_size_in_memory_not_many_times_it() -> None:
    """500,000 two-byte chunks (1 MB): a list of the pieces would hold over 40 MB."""
    tracemalloc.start()
    try:
        raw = _read_bounded(_Chunks(500_000), {}, 1 << 22)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(raw) == 1_000_000 and raw[:4] == b"ABBB"
    assert peak < 4 * len(raw), peak
    with pytest.raises(ReplyTooLarge):
        _read_bounded(_Chunks(500_000), {}, 999_999)


# --- malformed replies: refused by h11, retried -----------------------------------------------------
N = len(OK_BODY)
MALFORMED = {
    "conflicting-lengths": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Length: 5\r\n\r\n" % N + OK_BODY,
    "length-list": b"HTTP/1.1 200 OK\r\nContent-Length: %d, 5\r\n\r\n" % N + OK_BODY,
    "te-and-length": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
                     + b"%x\r\n" % N + OK_BODY + b"\r\n0\r\n\r\n",
    "plus-length": b"HTTP/1.1 200 OK\r\nContent-Length: +%d\r\n\r\n" % N + OK_BODY,
    "underscore-length": b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n" + OK_BODY,
    "hex-length": b"HTTP/1.1 200 OK\r\nContent-Length: 0x%x\r\n\r\n" % N + OK_BODY,
    "word-length": b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n" + OK_BODY,
    "hex-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x%x\r\n" % N + OK_BODY + b"\r\n0\r\n\r\n",
    "plus-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+%x\r\n" % N + OK_BODY + b"\r\n0\r\n\r\n",
    "underscore-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1_0\r\n" + OK_BODY[:16] + b"\r\n0\r\n\r\n",
    "notchunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: notchunked\r\n\r\n" + OK_BODY,
    "not-http": b"SSH-2.0-OpenSSH\r\n\r\n",
    "broken-header": b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n" + OK_BODY,
    "huge-header": b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
}
TRUNCATED = {
    "short-body": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"cho",
    "nothing": b"",
}


@pytest.mark.parametrize("raw", [*MALFORMED.values(), *TRUNCATED.values()], ids=[*MALFORMED, *TRUNCATED])
def test_malformed_or_cut_replies_are_refused_as_protocol_errors(raw: bytes) -> None:
    with serving(_then_close(raw)) as srv:
        with pytest.raises(httpcore.RemoteProtocolError):
            _post(DirectTransport(srv.base, "k"))


def test_a_refused_framing_is_a_retried_transient_error_never_a_reply() -> None:
    answers = iter([MALFORMED["te-and-length"], MALFORMED["plus-length"], _ok()])

    def handle(conn: socket.socket, head: list[str], body: bytes) -> bool:
        conn.sendall(next(answers))
        return False

    with serving(handle) as srv:
        be = LiteLLMBackend("openai/blob", api_base=srv.base, max_attempts=2, sleep=lambda s: None)
        r = be.complete([message("user", text_part("How many?"))])
        assert r.error is not None and is_transient_error(r.error) and "RemoteProtocolError" in r.error
        r = be.complete([message("user", text_part("How many?"))])  # the third answer is good
    assert r.error is None and r.text == "ANSWER: 4"


# --- the attempt's deadline -------------------------------------------------------------------------
def test_a_request_past_its_deadline_is_a_timeout_and_closes_its_connection() -> None:
    def handle(conn: socket.socket, head: list[str], body: bytes) -> bool:
        if body == b"hang":
            time.sleep(3)
            return False
        if body == b"trickle":  # a byte at a time: each read is quick, the whole reply is not
            for byte in _ok():
                conn.sendall(bytes([byte]))
                time.sleep(0.05)
            return False
        conn.sendall(_ok())
        return True

    with serving(handle) as srv:
        t = DirectTransport(srv.base, "k", max_connections=1)
        spent = []
        for body in (b"hang", b"trickle"):
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                t.complete_blocking(body, None, 0.4)
            spent.append(time.monotonic() - t0)
        reply = _post(t, b"{}", 5.0)  # the one connection slot is free again
    assert _text(reply) == "ANSWER: 4" and t.opened == 3  # neither timed-out connection was kept
    assert all(0.35 < s < 2 for s in spent), spent


# --- configuration that cannot go on the wire -------------------------------------------------------
@pytest.mark.parametrize(("key", "headers", "match"), [
    ("sk\r\nX-Evil: 1", None, "api_key contains a line break"),
    ("sk-abc\ndef", None, "api_key contains a line break"),
    ("sk-abc\x00", None, "api_key contains a line break"),
    ("sk-\x1b[2Jabc", None, "api_key contains a control"),
    ("sk-clé", None, "api_key contains a control or non-ASCII"),
    ("sk-ключ", None, "api_key contains a control or non-ASCII"),
    ("sk-ok", {"X-Org": "acme\r\nX-Evil: 1"}, "extra_headers\\['X-Org'\\] contains a line break"),
    ("sk-ok", {"X-Org": "a\x00b"}, "extra_headers\\['X-Org'\\] contains a line break"),
    ("sk-ok", {"X Org": "acme"}, "not a valid HTTP header name"),
    ("sk-ok", {"X-Org\r\nX-Evil": "1"}, "not a valid HTTP header name"),
    ("sk-ok", {"X-Org": 7}, "must be a string"),
], ids=["crlf-injection", "lf", "nul", "escape", "latin-1", "cyrillic", "header-crlf", "header-nul", "name-space",
        "name-crlf", "not-a-string"])
def test_keys_and_headers_that_cannot_go_on_the_wire_are_refused_before_any_request(
    key: str, headers: dict[str, Any] | None, match: str
) -> None:
    with serving(_reply(_ok())) as srv:
        with pytest.raises(UserError, match=match) as err:
            LiteLLMBackend("openai/blob", api_base=srv.base, api_key=key,
                           extra_params={"extra_headers": headers} if headers else None)
    assert srv.connections == 0
    shown = str(err.value)
    assert "\n" not in shown and "\r" not in shown  # one line
    if headers is None:  # a key is never shown
        assert "Evil" not in shown and key.strip() not in shown


def test_a_key_read_with_its_line_end_is_sent_without_it() -> None:
    with serving(_reply(_ok())) as srv:
        be = LiteLLMBackend("openai/blob", api_base=srv.base, api_key="sk-from-file-123\n", max_attempts=1)
        r = be.complete([message("user", text_part("How many?"))])
    assert r.error is None and "Authorization: Bearer sk-from-file-123" in srv.requests[0][0]


@pytest.mark.parametrize(("options", "match"), [
    ({"extra_params": {"top_p": float("nan")}}, "top_p is nan"),
    ({"temperature": float("inf")}, "temperature is inf"),
    ({"extra_params": {"extra_body": {"guided": [1.0, float("-inf")]}}}, r"extra_body.guided\[1\] is -inf"),
    ({"extra_params": {"seed": {1, 2}}}, "cannot be sent as JSON"),
])
def test_parameters_json_cannot_hold_are_refused_before_any_request(options: dict[str, Any], match: str) -> None:
    with pytest.raises(UserError, match=match):
        LiteLLMBackend("openai/blob", api_base="http://127.0.0.1:9/v1", **options)


@pytest.mark.parametrize("option", ["api_key=sk\r\nX-Evil: 1", 'extra_params={"top_p": NaN}'])
def test_cli_refuses_them_in_one_line_exit_2(option: str, tiny_dataset, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", "--data", str(tiny_dataset.root), "--agent", "direct", "--model", "openai/blob",
               "--out", str(tmp_path), "--no-progress", "--agent-option", "api_base=http://127.0.0.1:9/v1",
               "--agent-option", option])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "Evil" not in err[0], err


def test_a_space_or_accent_in_the_api_base_path_is_percent_encoded() -> None:
    with serving(_reply(_ok())) as srv:
        base = srv.base.replace("/v1", "/my models/é/v1")
        reply = _post(DirectTransport(base, "k"))
    assert _text(reply) == "ANSWER: 4"
    assert srv.requests[0][0][0] == "POST /my%20models/%C3%A9/v1/chat/completions HTTP/1.1"


@pytest.mark.parametrize("base", ["ftp://127.0.0.1/v1", "http:///v1", "http://127.0.0.1:99999/v1"])
def test_an_api_base_that_is_not_an_http_url_is_a_user_error(base: str) -> None:
    with pytest.raises(UserError, match="api_base"):
        DirectTransport(base, "k")


# --- connections: unreachable, proxy, TLS -----------------------------------------------------------
def test_an_unreachable_origin_is_one_clear_retryable_line() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    be = LiteLLMBackend("openai/blob", api_base=f"http://127.0.0.1:{port}/v1", max_attempts=2, backoff_base_s=0.01,
                        sleep=lambda s: None)
    err = be.complete([message("user", text_part("hi"))]).error
    assert err is not None and is_transient_error(err) and "\n" not in err
    assert f"gave up after 2 attempt(s), 0.0 s of backoff: ConnectError: cannot connect to 127.0.0.1:{port}: " in err


def test_behind_a_proxy_the_request_goes_to_the_proxy_in_absolute_form(monkeypatch: pytest.MonkeyPatch) -> None:
    with serving(_reply(_ok())) as proxy:
        for var in ("NO_PROXY", "no_proxy", "http_proxy", "all_proxy", "ALL_PROXY"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.base.rsplit("/v1", 1)[0])
        reply = _post(DirectTransport("http://model.invalid/v1", "sk-x"))
    assert _text(reply) == "ANSWER: 4"
    assert proxy.requests[0][0][0] == "POST http://model.invalid/v1/chat/completions HTTP/1.1"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_https_verifies_the_server_and_keeps_its_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "SSL_CERT_FILE"):
        monkeypatch.delenv(var, raising=False)
    with serving(_reply(_ok()), tls=server_tls) as srv:
        with pytest.raises(ConnectError, match="cannot connect to 127.0.0.1:.*CERTIFICATE_VERIFY_FAILED"):
            _post(DirectTransport(srv.base, "sk-x"))
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trusted as httpx would trust it
        kept = DirectTransport(srv.base, "sk-x")
        for _ in range(3):
            assert _text(_post(kept)) == "ANSWER: 4"
            time.sleep(0.05)  # late TLS records (session tickets) reach the idle connection
    assert kept.opened == 1  # kept alive over TLS
