"""``make_backend``: the backend a model id names (kept apart from the interface in ``base``, so
the backends, which build on ``base``, and the factory, which picks one, import one way)."""

from __future__ import annotations

from typing import Any

from countgym.agents.backends.base import LITELLM_PREFIXES, LOCAL_PREFIXES, ChatModel


def check_model_id(model: str) -> str:
    """The backend family (``"local"`` or ``"litellm"``) a model id names, without loading it.

    Raises ``UserError`` (one line) for an id no backend serves, so a run can refuse a
    placeholder or mistyped id before it builds a dataset or imports a client library.
    """
    from countgym.errors import UserError

    if not isinstance(model, str) or not model.strip():
        raise UserError(
            f"invalid model id {model!r}: use e.g. openai/gpt-4o-mini or hf:/path/to/model"
        )
    if model.startswith("REPLACE:"):
        raise UserError(
            f"model {model!r} is a config template's placeholder: replace it with the id your "
            "provider uses (e.g. openrouter/<vendor>/<model>, openai/..., gemini/..., or hf:<path>)"
        )
    if model.startswith(LOCAL_PREFIXES):
        return "local"
    if model.startswith(LITELLM_PREFIXES) or "/" in model:
        return "litellm"
    raise UserError(
        f"cannot tell which backend serves model {model!r}: prefix it with a provider "
        "(openai/, gemini/, anthropic/, openrouter/, hosted_vllm/) or hf:/local: for a local model"
    )


def make_backend(model: str, **options: Any) -> ChatModel:
    """Build the backend a model id names.

    ``hf:<path or hub id>`` and ``local:<path>`` load a local model with transformers; provider
    ids (``openai/...``, ``gemini/...``, ``anthropic/...``, ``openrouter/...``,
    ``hosted_vllm/...`` and anything else litellm routes) go through litellm.
    """
    if check_model_id(model) == "local":
        from countgym.agents.backends.transformers_backend import TransformersBackend

        return TransformersBackend(model.split(":", 1)[1], **options)
    from countgym.agents.backends.litellm_backend import LiteLLMBackend

    return LiteLLMBackend(model, **options)
