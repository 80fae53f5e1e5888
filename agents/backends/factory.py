"""``make_backend``: the backend a model id names (kept apart from the interface in ``base``, so
the backends, which build on ``base``, and the factory, which picks one, import one way)."""

from __future__ import annotations

from typing import Any

from countgym.agents.backends.base import LITELLM_PREFIXES, LOCAL_PREFIXES, ChatModel


def make_backend(model: str, **options: Any) -> ChatModel:
    """Build the backend a model id names.

    ``hf:<path or hub id>`` and ``local:<path>`` load a local model with transformers; provider
    ids (``openai/...``, ``gemini/...``, ``anthropic/...``, ``openrouter/...``,
    ``hosted_vllm/...`` and anything else litellm routes) go through litellm.
    """
    from countgym.errors import UserError

    if not isinstance(model, str) or not model.strip():
        raise UserError(
            f"invalid model id {model!r}: use e.g. openai/gpt-4o-mini or hf:/path/to/model"
        )
    if model.startswith(LOCAL_PREFIXES):
        from countgym.agents.backends.transformers_backend import TransformersBackend

        return TransformersBackend(model.split(":", 1)[1], **options)
    if model.startswith(LITELLM_PREFIXES) or "/" in model:
        from countgym.agents.backends.litellm_backend import LiteLLMBackend

        return LiteLLMBackend(model, **options)
    raise UserError(
        f"cannot tell which backend serves model {model!r}: prefix it with a provider "
        "(openai/, gemini/, anthropic/, openrouter/, hosted_vllm/) or hf:/local: for a local model"
    )
