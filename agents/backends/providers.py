"""OpenAI-compatible providers the direct transport reaches without litellm.

Each of these serves OpenAI's ``/chat/completions`` API at a fixed base URL with a bearer key:
``transport="direct"`` posts to it with the key from the provider's usual variable (the one
litellm reads), so a user who names ``groq/...`` or ``openrouter/...`` gets the direct path's
cost and memory. ``transport="auto"`` keeps litellm for them (it knows each provider's parameter
quirks and prices) except for the self-hosted servers (``openai/`` and ``hosted_vllm/`` with an
``api_base``), which speak exactly the OpenAI wire format.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Provider:
    """Where a provider's OpenAI-compatible API is and which variable holds its key."""

    api_base: str | None
    """The default endpoint (None: the user must give ``api_base``)."""
    key_vars: tuple[str, ...]
    """Environment variables read for the key, first set wins."""


PROVIDERS: dict[str, Provider] = {
    "openai": Provider(None, ("OPENAI_API_KEY",)),
    "hosted_vllm": Provider(None, ("HOSTED_VLLM_API_KEY",)),
    "openrouter": Provider("https://openrouter.ai/api/v1", ("OPENROUTER_API_KEY", "OR_API_KEY")),
    "together_ai": Provider("https://api.together.xyz/v1", ("TOGETHERAI_API_KEY", "TOGETHER_API_KEY", "TOGETHER_AI_API_KEY")),
    "groq": Provider("https://api.groq.com/openai/v1", ("GROQ_API_KEY",)),
    "deepseek": Provider("https://api.deepseek.com/v1", ("DEEPSEEK_API_KEY",)),
    "fireworks_ai": Provider("https://api.fireworks.ai/inference/v1", ("FIREWORKS_AI_API_KEY", "FIREWORKS_API_KEY")),
    "xai": Provider("https://api.x.ai/v1", ("XAI_API_KEY",)),
    "mistral": Provider("https://api.mistral.ai/v1", ("MISTRAL_API_KEY",)),
    "deepinfra": Provider("https://api.deepinfra.com/v1/openai", ("DEEPINFRA_API_KEY",)),
    "perplexity": Provider("https://api.perplexity.ai", ("PERPLEXITYAI_API_KEY", "PERPLEXITY_API_KEY")),
    "cerebras": Provider("https://api.cerebras.ai/v1", ("CEREBRAS_API_KEY",)),
    "nebius": Provider("https://api.studio.nebius.ai/v1", ("NEBIUS_API_KEY",)),
    "lm_studio": Provider("http://localhost:1234/v1", ("LM_STUDIO_API_KEY",)),
}
"""Provider prefix (as in litellm's model ids) -> its OpenAI-compatible endpoint."""

SELF_HOSTED = ("openai", "hosted_vllm")
"""Prefixes that ``transport="auto"`` sends directly when an ``api_base`` is given."""


def provider_of(model: str) -> str:
    """The prefix of a litellm model id (``groq/llama-3.3-70b`` -> ``groq``; none -> "")."""
    prefix, sep, rest = model.partition("/")
    return prefix if sep and rest else ""


def direct_endpoint(model: str, api_base: str | None) -> str | None:
    """The base URL the direct transport posts to for ``model``, or None when it cannot."""
    p = PROVIDERS.get(provider_of(model))
    if p is None:
        return None
    return api_base or p.api_base


HOSTED_KEY_VARS: dict[str, tuple[str, ...]] = {
    **{name: p.key_vars for name, p in PROVIDERS.items() if name not in ("hosted_vllm", "lm_studio")},
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
"""Hosted providers whose calls need a key, and the variables litellm and the direct transport
read it from (first set wins). Self-hosted servers (``hosted_vllm``, ``lm_studio``) need none."""

_OTHER_CREDENTIALS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_API_BASE"),
    "anthropic": ("ANTHROPIC_IDENTITY_TOKEN", "ANTHROPIC_IDENTITY_TOKEN_FILE", "ANTHROPIC_FEDERATION_RULE_ID"),
}
"""Variables that make a provider's key unnecessary or come from elsewhere: OpenAI's SDK and
litellm's endpoint variables (a server that may take no key), Anthropic's workload identity."""

_ENDPOINT_OPTIONS = ("api_key", "api_base", "base_url", "extra_headers", "headers")
"""Options (and ``extra_params`` entries) that give a key, a header or another endpoint: the
environment's key is then not needed."""


def missing_key(model: str, options: Mapping[str, object] | None = None) -> str | None:
    """One line naming the variable to set when a hosted model's provider has no key in the
    environment and the options give neither a key nor another endpoint; else None.

    Checked before a run's first episode: without it every episode would be logged as an
    authentication error, which a resume keeps (it is permanent), so setting the key and
    re-running the command would run nothing. Unknown providers and self-hosted servers are
    never refused (their calls report a missing key themselves)."""
    opts = dict(options or {})
    extra = opts.get("extra_params")
    if isinstance(extra, Mapping):
        opts.update({k: v for k, v in extra.items() if isinstance(k, str)})
    if any(opts.get(k) for k in _ENDPOINT_OPTIONS):
        return None
    prefix = provider_of(model)
    key_vars = HOSTED_KEY_VARS.get(prefix)
    if not key_vars or any(os.environ.get(v) for v in key_vars + _OTHER_CREDENTIALS.get(prefix, ())):
        return None
    litellm = sys.modules.get("litellm")  # a Python caller may have set litellm's own key
    if litellm is not None and any(getattr(litellm, a, None) for a in ("api_key", f"{prefix}_key")):
        return None
    return f"no API key for {model!r}: set {key_vars[0]} in the environment (or give the key as the agent option api_key)"


def provider_key(model: str) -> str | None:
    """The provider's key from its environment variable(s), or None."""
    p = PROVIDERS.get(provider_of(model))
    for var in p.key_vars if p else ():
        if os.environ.get(var):
            return os.environ[var]
    return None
