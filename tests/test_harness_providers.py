"""The direct transport reaches the OpenAI-compatible providers a user is likely to name, with
their own key (never another provider's), at their endpoint or the ``api_base`` given."""

from __future__ import annotations

import pytest

from countgym.agents.backends.litellm_backend import LiteLLMBackend
from countgym.agents.backends.providers import PROVIDERS, direct_endpoint, provider_key, provider_of
from countgym.errors import UserError


@pytest.mark.parametrize(("model", "url"), [
    ("groq/llama-3.3-70b-versatile", "https://api.groq.com/openai/v1/chat/completions"),
    ("openrouter/google/gemini-2.5-flash", "https://openrouter.ai/api/v1/chat/completions"),
    ("together_ai/meta-llama/Llama-4-Scout", "https://api.together.xyz/v1/chat/completions"),
    ("deepseek/deepseek-chat", "https://api.deepseek.com/v1/chat/completions"),
    ("fireworks_ai/accounts/fireworks/models/qwen2p5-vl", "https://api.fireworks.ai/inference/v1/chat/completions"),
    ("xai/grok-4", "https://api.x.ai/v1/chat/completions"),
    ("mistral/pixtral-large-latest", "https://api.mistral.ai/v1/chat/completions"),
])
def test_direct_reaches_each_provider_with_its_own_key(model: str, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for p in PROVIDERS.values():
        for var in p.key_vars:
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-must-not-leak")
    be = LiteLLMBackend(model, transport="direct")
    assert be.transport == "direct" and be._direct is not None and be._direct.url == url
    assert "sk-openai-must-not-leak" not in str(be._direct._headers())
    var = PROVIDERS[provider_of(model)].key_vars[0]
    monkeypatch.setenv(var, "sk-provider-key-123")
    be = LiteLLMBackend(model, transport="direct")
    assert be._direct._headers()["Authorization"] == "Bearer sk-provider-key-123"
    # The request names the model without the provider prefix, as litellm sends it.
    body = be._direct_body([{"role": "user", "content": "hi"}], None)
    assert b'"model":"' + model.split("/", 1)[1].encode() + b'"' in body


def test_an_api_base_overrides_the_provider_endpoint() -> None:
    assert direct_endpoint("groq/x", "http://127.0.0.1:9/v1") == "http://127.0.0.1:9/v1"
    assert direct_endpoint("openai/x", None) is None and direct_endpoint("gemini/x", None) is None
    assert provider_of("blob") == "" and provider_key("nobody/x") is None


def test_auto_keeps_litellm_for_hosted_providers() -> None:
    pytest.importorskip("litellm")
    assert LiteLLMBackend("groq/llama-3.3-70b-versatile").transport == "litellm"


def test_direct_for_an_unknown_provider_is_a_user_error() -> None:
    with pytest.raises(UserError, match="OpenAI-compatible provider .*groq/"):
        LiteLLMBackend("gemini/gemini-2.5-flash", transport="direct")
