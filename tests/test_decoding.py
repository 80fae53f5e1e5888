"""Decoding as the papers state it: the request parameters each arm really sends, and the
provider parameters its episodes record (CountVideoBench 5.1; CounterCount 3.1, 4.1.4, C.7;
Give the Model a Finger 5 and App. G)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("litellm")

from countgym.agents.backends import reasoning as R  # noqa: E402
from countgym.agents.backends.base import message, text_part  # noqa: E402
from countgym.agents.backends.factory import make_backend  # noqa: E402
from countgym.agents.backends.litellm_backend import LiteLLMBackend, _litellm  # noqa: E402
from countgym.agents.cf_arm import parse_cf_arm  # noqa: E402
from countgym.cli import main  # noqa: E402
from countgym.logs import read_records  # noqa: E402
from countgym.testing.server import TestServer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")
MESSAGES = [message("user", text_part("How many dots are in the image?"))]


@pytest.fixture(autouse=True)
def fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-decoding")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("decoding")
    cc, cv, da = root / "cc", root / "cv", root / "da"
    assert main(["scenes", "make", "countercount", "--out", str(cc), "--limit", "1", "--no-progress"]) == 0
    assert main(["scenes", "make", "countvideo", "--out", str(cv), "--limit", "1", "--size", "64x36",
                 "--no-progress"]) == 0
    assert main(["scenes", "make", "dotarrays-main", "--out", str(da), "--limit", "1", "--no-progress"]) == 0
    return {"cc": cc, "cv": cv, "da": da}


def _run(srv: TestServer, data: Path, agent: str, out: Path, *extra: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One CLI run against the test server: (the last request body, the episode's provider params)."""
    code = main(["run", "--data", str(data), "--agent", agent, "--model", "openai/blob", "--limit", "1",
                 "--agent-option", f"api_base={srv.base_url}", "--out", str(out), "--no-progress", *extra])
    assert code == 0
    body = {k: v for k, v in (srv.last_request or {}).items() if k != "messages"}
    recs = read_records([out])
    assert recs and all(r.end != "error" for r in recs)
    return body, recs[-1].arm.options["provider"]


# --------------------------------------------------------------------------- what each arm sends
def test_each_arm_sends_the_papers_decoding_and_logs_it(data: dict[str, Path], tmp_path: Path) -> None:
    with TestServer() as srv:
        # CountVideoBench 5.1: max_tokens=1024 for every model, nothing else stated.
        body, prov = _run(srv, data["cv"], "video-p1", tmp_path / "video")
        assert body["max_tokens"] == 1024 and "reasoning_effort" not in body and "chat_template_kwargs" not in body
        assert prov["max_tokens"] == 1024 and prov["reasoning"] == "default" and prov["reasoning_params"] == {}
        # CounterCount baseline (3.1): reasoning disabled, 128 tokens, greedy.
        body, prov = _run(srv, data["cc"], "cf-mcq", tmp_path / "cf")
        assert body["max_tokens"] == 128 and body["temperature"] == 0
        assert body["chat_template_kwargs"] == {"enable_thinking": False} and "reasoning_effort" not in body
        assert prov["reasoning"] == "off" and prov["reasoning_disabled"] is True
        assert prov["reasoning_params"] == {"chat_template_kwargs": {"enable_thinking": False}}
        # CounterCount thinking mode (4.1.4, C.7): thinking on, 16,384 tokens, default sampling.
        body, prov = _run(srv, data["cc"], "cf-oe+think", tmp_path / "think")
        assert body["max_tokens"] == 16384 and "temperature" not in body
        assert body["chat_template_kwargs"] == {"enable_thinking": True}
        assert prov["temperature"] == "provider default" and prov["reasoning"] == "on"
        # Finger (Section 5): temperature 0, low reasoning effort; thinking-off control (App. G).
        body, prov = _run(srv, data["da"], "direct", tmp_path / "direct")
        assert body["temperature"] == 0 and body["reasoning_effort"] == "low"
        assert prov["reasoning"] == "low" and prov["reasoning_params"] == {"reasoning_effort": "low"}
        body, prov = _run(srv, data["da"], "direct", tmp_path / "off", "--no-thinking")
        assert body["chat_template_kwargs"] == {"enable_thinking": False} and "reasoning_effort" not in body
        assert prov["reasoning"] == "off" and prov["reasoning_disabled"] is True


def test_thinking_off_request_reports_no_reasoning_tokens(data: dict[str, Path], tmp_path: Path) -> None:
    """The recorded reasoning tokens follow the request (the test server honours the switch)."""
    with TestServer(reasoning_tokens=9) as srv:
        _run(srv, data["da"], "direct", tmp_path / "on")
        _run(srv, data["da"], "direct", tmp_path / "off", "--no-thinking")
    on, off = (read_records([tmp_path / d])[0] for d in ("on", "off"))
    assert on.steps[0].usage.reasoning_tokens == 9 and off.steps[0].usage.reasoning_tokens == 0


def test_arm_backend_options() -> None:
    from countgym.agents.video_arm import video_backend_options

    assert video_backend_options("openai/gpt-5.4") == {"max_tokens": 1024, "reasoning": "default"}
    assert video_backend_options("hf:/m") == {"max_new_tokens": 1024}
    assert parse_cf_arm("cf-mcq").backend_options("hf:/m") == {
        "thinking": False, "max_new_tokens": 128, "decoding": "greedy"}
    assert parse_cf_arm("cf-mcq+think").backend_options("hf:/m") == {
        "thinking": True, "max_new_tokens": 16384, "decoding": "sample"}
    assert parse_cf_arm("cf-oe+think").backend_options("gemini/x") == {
        "reasoning": "on", "temperature": None, "max_tokens": 16384}


# --------------------------------------------------------------------------- reasoning off, by provider
@pytest.mark.parametrize(
    ("model", "params", "disabled"),
    [
        ("openai/gpt-5.4", {"reasoning_effort": "none"}, True),
        ("openai/gpt-5-mini", {"reasoning_effort": "minimal"}, False),  # accepts no "none"
        ("openai/o3", {"reasoning_effort": "low"}, False),
        ("openai/gpt-4o", {}, True),  # does not reason
        ("gemini/gemini-2.5-flash", {"reasoning_effort": "none"}, True),  # thinking budget 0
        ("gemini/gemini-2.5-pro", {"reasoning_effort": "minimal"}, False),
        ("gemini/gemini-3-pro-preview", {"reasoning_effort": "minimal"}, False),
        ("anthropic/claude-sonnet-4-5", {"thinking": {"type": "disabled"}}, True),
        ("openrouter/google/gemini-3.1-flash-lite", {"reasoning": {"effort": "none"}}, True),
        ("openrouter/google/gemini-3.7-flash", {"reasoning": {"effort": "minimal"}}, False),
        ("openrouter/google/gemini-3.1-pro", {"reasoning": {"effort": "minimal"}}, False),
        ("openrouter/openai/gpt-5-mini", {"reasoning": {"effort": "minimal"}}, False),
        ("openrouter/x-ai/grok-4.20", {"reasoning": {"effort": "none"}}, None),
        ("hosted_vllm/Qwen/Qwen3-8B", {"chat_template_kwargs": {"enable_thinking": False}}, True),
    ],
)
def test_reasoning_off_per_provider(model: str, params: dict[str, Any], disabled: bool | None) -> None:
    req = R.reasoning_request(model, "off")
    assert (req.params, req.disabled) == (params, disabled)
    assert req.disabled is True or req.note  # every non-disabled case says why


@pytest.mark.parametrize(
    ("model", "provider", "want"),
    [
        ("gemini-2.5-flash", "gemini", {"thinkingConfig": {"thinkingBudget": 0, "includeThoughts": False}}),
        ("claude-sonnet-4-5", "anthropic", {"thinking": {"type": "disabled"}}),
        ("gpt-5.4", "openai", {"reasoning_effort": "none"}),
    ],
)
def test_litellm_maps_reasoning_off_to_the_providers_switch(model: str, provider: str, want: dict) -> None:
    """What litellm puts in the provider's request for our parameters (no network)."""
    from litellm.utils import get_optional_params

    req = R.reasoning_request(f"{provider}/{model}", "off")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = get_optional_params(model=model, custom_llm_provider=provider, drop_params=True, max_tokens=128,
                                  **req.params)
    assert want.items() <= got.items()


def test_backend_sends_the_provider_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The keyword arguments ``litellm.acompletion`` receives, for providers without a test server."""
    sent: list[dict[str, Any]] = []

    async def fake_completion(**kw: Any) -> Any:
        sent.append(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr(_litellm(), "acompletion", fake_completion)
    for model in ("anthropic/claude-sonnet-4-5", "gemini/gemini-2.5-flash"):
        LiteLLMBackend(model, api_key="k", thinking=False, max_attempts=1).complete(MESSAGES)
    assert sent[0]["thinking"] == {"type": "disabled"} and "reasoning_effort" not in sent[0]
    assert sent[1]["reasoning_effort"] == "none"


def test_openrouter_reasoning_object_on_the_wire() -> None:
    with TestServer() as srv:
        be = LiteLLMBackend("openrouter/google/gemini-2.5-flash", api_base=srv.base_url, api_key="k",
                            thinking=False)
        be.complete(MESSAGES)
        body = srv.last_request
    assert body["reasoning"] == {"effort": "none"} and "reasoning_effort" not in body


def test_cannot_disable_is_recorded_and_warned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from countgym.agents.backends import litellm_backend as lb

    monkeypatch.setattr(lb, "_WARNED", set())
    with pytest.warns(UserWarning, match="gpt-5-mini: reasoning cannot be disabled") as rec:
        be = make_backend("openai/gpt-5-mini", thinking=False)
        make_backend("openai/gpt-5-mini", thinking=False)
    assert sum("gpt-5-mini" in str(w.message) for w in rec) == 1
    p = be.provider_params()
    assert p["reasoning_disabled"] is False and p["reasoning_params"] == {"reasoning_effort": "minimal"}
    assert "minimal" in p["reasoning_note"]


def test_reasoning_tokens_under_off_warn_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint that ignores the switch is caught from its usage."""
    from countgym.agents.backends import litellm_backend as lb

    monkeypatch.setattr(lb, "_WARNED", set())
    with TestServer(reasoning_tokens=5) as srv:
        be = LiteLLMBackend("openai/blob", api_base=srv.base_url, thinking_off_effort="low", thinking=False)
        with pytest.warns(UserWarning, match="reported 5 reasoning tokens") as rec:
            be.complete(MESSAGES)
            be.complete(MESSAGES)
    assert sum("reasoning tokens" in str(w.message) for w in rec) == 1


def test_unknown_reasoning_mode_is_an_error() -> None:
    from countgym.errors import UserError

    with pytest.raises(UserError, match="reasoning mode"):
        R.reasoning_request("openai/x", "maximal")
