"""The direct OpenAI-compatible transport: the same request body as litellm sends, the same reply
handling, no litellm import, untrusted replies retried not crashed, and the option to choose."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from countgym.agents.backends.base import image_part, message, text_part
from countgym.agents.backends.litellm_backend import LiteLLMBackend
from countgym.agents.backends.openai_direct import parse_reply
from countgym.cli import main
from countgym.envs import native_tools as NT
from countgym.errors import UserError, is_transient_error
from countgym.testing.server import TestServer

KEY = "sk-test-direct-SECRET42"
IMAGE = np.zeros((6, 8, 3), np.uint8)
MESSAGES = [
    {"role": "system", "content": "Count the dots."},
    message("user", image_part(IMAGE), text_part("How many dots? Answer as ANSWER: n")),
]
pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def _sent(srv: TestServer, transport: str, tools: Any = None, **kw: Any) -> tuple[dict[str, Any], Any, str | None]:
    be = LiteLLMBackend("openai/blob", api_base=srv.base_url, transport=transport, seed=0, **kw)
    reply = be.complete(MESSAGES, tools=tools) if tools else be.complete(MESSAGES)
    return srv.last_request or {}, reply, srv.last_headers.get("authorization")


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"reasoning": "off"},
        {"reasoning": "on", "temperature": None, "max_tokens": None},
        {"reasoning_effort": "high", "max_tokens": 77, "temperature": 0.7},
        {"reasoning": "default", "extra_params": {"top_p": 1, "seed": 3}},
        {"api_key": "sk-explicit-direct-KEY9"},
        {"native": True},
    ],
    ids=["low", "off", "on", "effort", "extra", "explicit-key", "native-tools"],
)
def test_direct_sends_what_litellm_sends(options: dict[str, Any]) -> None:
    pytest.importorskip("litellm")
    options = dict(options)
    tools = NT.tool_schema(("tag",), "dots", "dot") if options.pop("native", False) else None
    with TestServer() as srv:
        lite_body, lite_reply, lite_auth = _sent(srv, "litellm", tools, **options)
        direct_body, direct_reply, direct_auth = _sent(srv, "direct", tools, **options)
    # Messages (the image's data URL included), temperature, max_tokens, reasoning, tools, extras.
    assert direct_body == lite_body
    assert direct_auth == lite_auth
    for field in ("text", "usage", "cost", "error", "tool_calls"):
        assert getattr(direct_reply, field) == getattr(lite_reply, field), field


@pytest.mark.slow
def test_direct_path_never_imports_litellm(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from countgym.testing.server import TestServer\n"
        "from countgym.agents.backends.factory import make_backend\n"
        "from countgym.agents.backends.base import message, text_part\n"
        "with TestServer() as srv:\n"
        "    be = make_backend('openai/blob', api_base=srv.base_url)\n"
        "    r = be.complete([message('user', text_part('How many dots? ANSWER: n'))])\n"
        "print(be.transport, r.error, 'litellm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["direct", "None", "False"]


def test_auto_picks_direct_only_for_openai_with_an_api_base() -> None:
    assert LiteLLMBackend("openai/blob", api_base="http://127.0.0.1:9/v1").transport == "direct"
    assert LiteLLMBackend("openai/blob", api_base="http://127.0.0.1:9/v1", transport="litellm").transport == "litellm"
    pytest.importorskip("litellm")
    assert LiteLLMBackend("openai/gpt-4o-mini").transport == "litellm"  # OpenAI itself: litellm
    # OpenAI's own names behind an api_base (a proxy of OpenAI): litellm's parameter rules and prices.
    for name in ("gpt-4o-mini", "o3-mini", "gpt-5-mini", "chatgpt-4o-latest"):
        assert LiteLLMBackend(f"openai/{name}", api_base="http://127.0.0.1:9/v1").transport == "litellm"
    assert LiteLLMBackend("openai/Qwen/Qwen2.5-VL-7B-Instruct", api_base="http://127.0.0.1:9/v1").transport == "direct"
    assert LiteLLMBackend("openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1", transport="direct").transport == "direct"
    assert LiteLLMBackend("hosted_vllm/blob", api_base="http://127.0.0.1:9/v1").transport == "litellm"


def test_the_transport_is_recorded_with_the_provider_parameters() -> None:
    assert LiteLLMBackend("openai/blob", api_base="http://127.0.0.1:9/v1").provider_params()["transport"] == "direct"
    pytest.importorskip("litellm")
    slow = LiteLLMBackend("openai/blob", api_base="http://127.0.0.1:9/v1", transport="litellm")
    assert slow.provider_params()["transport"] == "litellm"


@pytest.mark.parametrize(
    ("model", "api_base", "transport", "match"),
    [
        ("openai/blob", "http://127.0.0.1:9/v1", "fast", "transport must be one of auto, direct, litellm"),
        ("gemini/gemini-2.5-flash", "http://127.0.0.1:9/v1", "direct", "needs an openai/<name> model"),
        ("openai/blob", None, "direct", "without api_base"),
    ],
)
def test_bad_transport_is_a_user_error(model: str, api_base: str | None, transport: str, match: str) -> None:
    with pytest.raises(UserError, match=match):
        LiteLLMBackend(model, api_base=api_base, transport=transport)


def test_cli_bad_transport_is_one_line_exit_2(tiny_dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", "--data", str(tiny_dataset.root), "--agent", "direct", "--model", "openai/blob",
               "--out", str(tmp_path), "--no-progress", "--agent-option", "api_base=http://127.0.0.1:9/v1",
               "--agent-option", "transport=fastest"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "transport must be one of" in err[0]


# --- untrusted replies ------------------------------------------------------------------------------
class _Canned(BaseHTTPRequestHandler):
    """Answers every POST with the next canned (status, body), then a good reply."""

    replies: list[tuple[int, bytes]] = []
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        good = json.dumps({"choices": [{"message": {"content": "ANSWER: 2"}, "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 5, "completion_tokens": 2}}).encode()
        status, body = self.replies.pop(0) if self.replies else (200, good)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # dozens of connections at once (the default of 5 resets some under load)


def _serve(handler: Any) -> Iterator[tuple[str, Any]]:
    """A local server for ``handler`` in a background thread: yields (its /v1 URL, the handler)."""
    httpd = _Server(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def canned() -> Iterator[tuple[str, type[_Canned]]]:
    yield from _serve(type("Handler", (_Canned,), {"replies": []}))


BAD_BODIES = [
    b'{"choices": [{"message": {"content": ["not", "a", "string"]}}]}',
    b'{"choices": {"0": {"message": {"content": "ANSWER: 2"}}}}',
    b'{"choices": [{"message": "ANSWER: 2"}]}',
    b'{"choices": [{"message": {"content": "x", "tool_calls": {"id": 1}}}]}',
    b"[1, 2, 3]",
    b"\xff\xfe not json",
    b'"just a string"',
]


def test_malformed_replies_are_retried_never_raised(canned) -> None:
    url, handler = canned
    handler.replies = [(200, body) for body in BAD_BODIES]
    be = LiteLLMBackend("openai/blob", api_base=url, transport="direct", max_attempts=len(BAD_BODIES) + 1,
                        sleep=lambda s: None, seed=0)
    r = be.complete(MESSAGES)
    assert r.error is None and r.text == "ANSWER: 2"
    assert r.usage is not None and (r.usage.prompt_tokens, r.usage.completion_tokens) == (5, 2)


def test_malformed_replies_end_in_a_transient_error(canned) -> None:
    url, handler = canned
    handler.replies = [(200, BAD_BODIES[0])] * 3
    be = LiteLLMBackend("openai/blob", api_base=url, transport="direct", max_attempts=3, sleep=lambda s: None)
    r = be.complete(MESSAGES)
    assert r.text == "" and r.error is not None and is_transient_error(r.error) and "gave up after 3" in r.error


def test_odd_usage_fields_are_unknown_not_a_crash() -> None:
    reply = parse_reply(json.dumps({
        "choices": [{"message": {"content": "ANSWER: 1"}}],
        "usage": {"prompt_tokens": "many", "completion_tokens": True, "completion_tokens_details": [1]},
    }).encode())
    assert reply.usage.prompt_tokens is None and reply.usage.completion_tokens is None
    assert reply.usage.completion_tokens_details is None


def test_error_status_without_json_keeps_its_status_and_scrubs_the_key(canned) -> None:
    url, handler = canned
    handler.replies = [(502, f"<html>bad gateway {KEY}</html>".encode()), (418, b"teapot")]
    be = LiteLLMBackend("openai/blob", api_base=url, transport="direct", sleep=lambda s: None, seed=0)
    r = be.complete(MESSAGES)  # 502: retried; 418: a client error, not retried
    assert r.text == "" and r.error is not None and "HTTP 418" in r.error and not is_transient_error(r.error)
    handler.replies = [(502, f"<html>bad gateway {KEY}</html>".encode())] * 2
    r = LiteLLMBackend("openai/blob", api_base=url, transport="direct", max_attempts=2,
                       sleep=lambda s: None).complete(MESSAGES)
    assert r.error is not None and "HTTP 502" in r.error and KEY not in r.error and "SECRET42" not in r.error


# --- connections ---------------------------------------------------------------------------
class _Slow(_Canned):
    """Holds every request for a moment and notes which connection (client port) it came on."""

    ports: list[int] = []
    in_flight = 0
    peak = 0
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        cls = type(self)
        with cls.lock:
            cls.ports.append(self.client_address[1])
            cls.in_flight += 1
            cls.peak = max(cls.peak, cls.in_flight)
        time.sleep(0.2)
        with cls.lock:
            cls.in_flight -= 1
        super().do_POST()


def _burst(url: str, n: int, max_connections: int) -> tuple[Any, list[Any]]:
    """Two bursts of ``n`` requests at once, each from its own thread."""
    from concurrent.futures import ThreadPoolExecutor

    from countgym.agents.backends.openai_direct import DirectTransport, request_body

    transport = DirectTransport(url, "sk-x", max_connections=max_connections)
    body = request_body("openai/blob", [{"role": "user", "content": "hi"}], {})
    with ThreadPoolExecutor(n) as pool:
        replies = [*pool.map(lambda _: transport.complete_blocking(body, None, 20.0), range(n))]
        replies += pool.map(lambda _: transport.complete_blocking(body, None, 20.0), range(n))
    transport.close()
    return transport, replies


@pytest.fixture
def slow() -> Iterator[tuple[str, type[_Slow]]]:
    yield from _serve(type("Handler", (_Slow,), {"replies": [], "ports": [], "in_flight": 0, "peak": 0,
                                                 "lock": threading.Lock()}))


def test_concurrent_requests_run_together_and_reuse_connections(slow) -> None:
    """20 requests at once from 20 threads open 20 connections, all 20 are in flight together,
    and a second burst reuses them (keep-alive)."""
    url, handler = slow
    transport, replies = _burst(url, 20, max_connections=64)
    assert all(r.choices[0].message.content == "ANSWER: 2" for r in replies)
    assert handler.peak == 20
    assert len(set(handler.ports)) == 20 == transport.opened  # the second burst opened none


def test_the_pool_never_opens_more_connections_than_allowed(slow) -> None:
    url, handler = slow
    transport, replies = _burst(url, 30, max_connections=12)
    assert len(replies) == 60 and all(r.choices[0].message.content == "ANSWER: 2" for r in replies)
    assert handler.peak == 12 and len(set(handler.ports)) == 12 == transport.opened


def _data_url(n: int, head: str = "data:image/png;base64,") -> str:
    import base64

    return head + base64.b64encode(np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()).decode()


def test_request_bodies_are_what_the_json_encoder_writes() -> None:
    """Large data URLs are spliced in as they are: the bytes are exactly json.dumps's, and the
    caller's messages are not changed."""
    from countgym.agents.backends.openai_direct import request_body

    big, big2 = _data_url(60_000), _data_url(9_000, "data:image/jpeg;base64,")
    odd = _data_url(9_000, 'data:image/png;x="1";base64,')  # a quote in the head: escaped by the encoder
    wire = [
        {"role": "system", "content": "Count \"dots\" \\ exactly; ünïcode"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": big, "detail": "high"}},
                                     {"type": "text", "text": "how many?"}]},
        {"role": "assistant", "content": "x", "tool_calls": [{"id": "c", "type": "function",
                                                              "function": {"name": "tag", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url", "image_url": {"url": big2}}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": _data_url(30)}},
                                     {"type": "image_url", "image_url": {"url": odd}},
                                     {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
                                     {"type": "image_url", "image_url": {"url": big}}]},
    ]
    before = json.dumps(wire)
    params = {"temperature": 0, "max_tokens": 64, "extra_body": {"top_k": 5}}
    body = request_body("openai/blob", wire, params)
    expect = {"model": "blob", "messages": wire, "temperature": 0, "max_tokens": 64, "top_k": 5}  # extra_body merged in
    assert body == json.dumps(expect, separators=(",", ":")).encode()
    assert json.dumps(wire) == before


@pytest.mark.parametrize("url,safe", [
    (_data_url(9_000), True),
    (_data_url(30), False),  # short: not worth it
    (_data_url(9_000).replace("A", "\\", 1), False),
    (_data_url(9_000).replace("A", "é", 1), False),
    (_data_url(9_000).replace("A", "\n", 1), False),
    (_data_url(9_000, "data:image/png,"), False),  # not base64
    (_data_url(9_000, "data:image/p\x01g;base64,"), False),
    ("x" * 9_000, False),
    (None, False),
])
def test_which_data_urls_go_in_unescaped(url: Any, safe: bool) -> None:
    from countgym.agents.backends.openai_direct import json_safe_data_url

    assert json_safe_data_url(url) is safe
