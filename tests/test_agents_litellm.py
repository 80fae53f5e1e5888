"""The litellm backend against the local test server: real HTTP, usage, cost, retries, secrets."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageDraw

pytest.importorskip("litellm")

from countgym.agents.backends.base import image_part, message, text_part  # noqa: E402
from countgym.agents.backends.factory import make_backend  # noqa: E402
from countgym.agents.backends.litellm_backend import LiteLLMBackend  # noqa: E402
from countgym.envs import templates as T  # noqa: E402
from countgym.errors import MissingExtraError, UserError  # noqa: E402
from countgym.testing.server import TestServer  # noqa: E402

KEY = "sk-test-SECRET123"
# litellm's own pydantic models warn at import; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")


@pytest.fixture(autouse=True)
def fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


TRANSPORT = {"now": "auto"}


@pytest.fixture(autouse=True, params=["direct", "litellm"])
def transport(request: pytest.FixtureRequest) -> str:
    """Every test here runs over both transports (``backend`` builds with the current one)."""
    TRANSPORT["now"] = request.param
    return request.param


def disc_image() -> np.ndarray:
    im = Image.new("RGB", (400, 300), "white")
    d = ImageDraw.Draw(im)
    for x, y in [(50, 50), (200, 100), (300, 250)]:
        d.ellipse([x - 12, y - 12, x + 12, y + 12], fill="black")
    return np.asarray(im)


MESSAGES = [message("user", image_part(disc_image()), text_part(T.DIRECT.format(obj="dots")))]


class Sleeps(list):
    """Records backoff waits instead of sleeping (keeps retry tests fast)."""

    def __call__(self, s: float) -> None:
        self.append(s)


def backend(srv: TestServer, **kw) -> LiteLLMBackend:
    kw.setdefault("sleep", Sleeps())
    kw.setdefault("transport", TRANSPORT["now"])
    return LiteLLMBackend("openai/blob", api_base=srv.base_url, seed=0, **kw)


def test_reply_usage_reasoning_and_unknown_cost() -> None:
    with TestServer(reasoning_tokens=11) as srv:
        r = backend(srv).complete(MESSAGES)
        sent = srv.last_request
        auth = srv.last_headers.get("authorization")
    assert r.error is None and r.text == "ANSWER: 3"
    assert r.usage is not None and r.usage.reasoning_tokens == 11
    # 400 x 300 is one 512-px tile: 85 + 170 image tokens plus ~30 text tokens.
    assert 255 < r.usage.prompt_tokens < 400
    assert r.usage.completion_tokens == len("ANSWER: 3") // 4 + 1 + 11
    assert r.cost is None  # litellm does not know "blob"
    assert r.latency_s is not None and r.latency_s > 0
    # The request on the wire: temperature 0, the image as a PNG data URL, the key as bearer.
    assert sent["temperature"] == 0
    part = sent["messages"][0]["content"][0]
    assert part["type"] == "image_url" and part["image_url"]["url"].startswith(
        "data:image/png;base64,"
    )
    assert auth == f"Bearer {KEY}"


def test_cost_from_configured_prices() -> None:
    with TestServer() as srv:
        r = backend(srv, input_cost_per_token=1e-6, output_cost_per_token=4e-6).complete(MESSAGES)
    assert r.usage is not None
    want = r.usage.prompt_tokens * 1e-6 + r.usage.completion_tokens * 4e-6
    assert r.cost == pytest.approx(want)


def test_reasoning_effort_sent_and_thinking_off() -> None:
    with TestServer() as srv:
        backend(srv).complete(MESSAGES)
        on = srv.last_request
        backend(srv, thinking=False).complete(MESSAGES)
        off = srv.last_request
        backend(srv, reasoning_effort=None, max_tokens=77).complete(MESSAGES)
        omitted = srv.last_request
    assert on.get("reasoning_effort") == "low"
    # An OpenAI-compatible server: the chat template's switch, not a "minimal" effort.
    assert off.get("chat_template_kwargs") == {"enable_thinking": False} and "reasoning_effort" not in off
    assert "reasoning_effort" not in omitted and omitted["max_tokens"] == 77


def test_429_honours_retry_after_then_succeeds() -> None:
    sleeps = Sleeps()
    with TestServer(schedule=["429", "ok"], retry_after=3) as srv:
        r = backend(srv, sleep=sleeps).complete(MESSAGES)
        assert srv.request_count == 2
    assert r.error is None and r.text == "ANSWER: 3"
    assert len(sleeps) == 1 and 3.0 <= sleeps[0] <= 3.3


@pytest.mark.parametrize("fault", ["500", "503", "malformed", "empty", "drop"])
def test_transient_faults_are_retried(fault: str) -> None:
    sleeps = Sleeps()
    with TestServer(schedule=[fault, fault, "ok"]) as srv:
        r = backend(srv, sleep=sleeps, backoff_base_s=1.0).complete(MESSAGES)
        assert srv.request_count == 3
    assert r.error is None and r.text == "ANSWER: 3"
    # Exponential with equal jitter: attempt k waits within [0.5, 1] x base x 2^(k-1).
    assert 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0


def test_timeout_is_retried() -> None:
    with TestServer(schedule=["timeout", "ok"], timeout_sleep_s=2.0) as srv:
        r = backend(srv, timeout_s=0.5).complete(MESSAGES)
        assert srv.request_count == 2
    assert r.error is None and r.text == "ANSWER: 3"
    assert r.latency_s is not None and r.latency_s >= 0.5


def test_attempts_are_bounded() -> None:
    sleeps = Sleeps()
    with TestServer(schedule=["500"] * 10) as srv:
        r = backend(srv, sleep=sleeps, max_attempts=3).complete(MESSAGES)
        assert srv.request_count == 3
    assert r.text == "" and r.error is not None and "gave up after 3 attempt" in r.error
    assert len(sleeps) == 2


def test_total_wait_is_bounded() -> None:
    sleeps = Sleeps()
    with TestServer(schedule=["429"] * 10, retry_after=30) as srv:
        r = backend(srv, sleep=sleeps, max_total_wait_s=40).complete(MESSAGES)
        assert srv.request_count == 2
    assert r.error is not None and "max_total_wait_s" in r.error
    assert sum(sleeps) <= 40


def test_auth_error_is_not_retried_and_key_is_scrubbed() -> None:
    with TestServer(schedule=["401"] * 5) as srv:
        r = backend(srv).complete(MESSAGES)
        assert srv.request_count == 1
    assert r.text == "" and r.error is not None and "AuthenticationError" in r.error
    assert KEY not in r.error and "SECRET123" not in r.error


def test_explicit_key_is_scrubbed_too() -> None:
    explicit = "sk-explicit-ABCDEFGH9"
    with TestServer(schedule=["401"]) as srv:
        be = backend(srv, api_key=explicit)
        r = be.complete(MESSAGES)
    assert r.error is not None and explicit not in r.error
    assert explicit not in repr(be)


@pytest.mark.parametrize(
    ("fault", "word"),
    [("context", "ContextWindow"), ("400", "BadRequest"), ("filter", "content filter")],
)
def test_non_retryable_errors_end_the_call(fault: str, word: str) -> None:
    with TestServer(schedule=[fault] * 3) as srv:
        r = backend(srv).complete(MESSAGES)
        assert srv.request_count == 1
    assert r.text == "" and r.error is not None and word in r.error


@pytest.mark.slow
def test_complete_batch_runs_in_parallel() -> None:
    with TestServer(latency_s=0.3) as srv:
        be = backend(srv, batch_concurrency=4)
        be.complete(MESSAGES)  # warm: litellm import and client set-up
        replies = be.complete_batch([MESSAGES] * 4)
    assert [r.text for r in replies] == ["ANSWER: 3"] * 4
    assert max(r.latency_s for r in replies) < 4 * 0.3


def test_make_backend_routes_and_names_missing_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    be = make_backend("openai/blob", api_base="http://127.0.0.1:9/v1")
    assert isinstance(be, LiteLLMBackend)
    with pytest.raises(UserError, match="prefix it with a provider"):
        make_backend("blob")
    import importlib.util

    orig = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("litellm", "torch") else orig(name, *a),
    )
    with pytest.raises(MissingExtraError, match=r"\[api\]'?$"):
        make_backend("gemini/gemini-2.5-flash")
    with pytest.raises(MissingExtraError, match=r"\[local\]'?$"):
        make_backend("hf:/nowhere")


def test_cost_of_a_model_litellm_knows(transport: str) -> None:
    import litellm

    prices = litellm.model_cost["gpt-4o-mini"]
    with TestServer() as srv:
        r = LiteLLMBackend("openai/gpt-4o-mini", api_base=srv.base_url, transport=transport).complete(MESSAGES)
    if transport == "direct":  # a server of one's own: no price list, cost unknown unless given
        assert r.usage is not None and r.cost is None
        return
    assert r.usage is not None and r.cost is not None
    want = (
        r.usage.prompt_tokens * prices["input_cost_per_token"]
        + r.usage.completion_tokens * prices["output_cost_per_token"]
    )
    assert r.cost == pytest.approx(want, rel=1e-6)
