"""What a request must carry to set a model's reasoning ("thinking") the way a paper states it.

Four modes, one per protocol:

=========  ===================================================================================
mode       sent
=========  ===================================================================================
low        ``reasoning_effort="low"`` (Give the Model a Finger, Section 5: "low reasoning effort
           where the model supports it"; models without it drop the parameter)
off        what disables reasoning on that provider (CounterCount baseline, Section 3.1; the
           thinking-off control of Give the Model a Finger, App. G, Table 21), see below
default    nothing: the provider's own setting (CountVideoBench, Section 5.1, states only
           max_tokens=1024)
on         reasoning enabled with the provider's defaults (CounterCount thinking mode, 4.1.4)
=========  ===================================================================================

Reasoning off, by provider (the parameter names litellm takes and maps to each API):

- an OpenAI-compatible server (``hosted_vllm/``, or ``openai/`` with ``api_base``):
  ``chat_template_kwargs={"enable_thinking": False}``, the switch of the chat templates of
  Qwen3 and the like (vLLM passes it to the template);
- ``openai/``: ``reasoning_effort="none"`` where the model accepts it (GPT-5.1 and later); GPT-5,
  GPT-5 mini/nano accept at least "minimal", the o-series "low": reasoning cannot be disabled there;
  models without reasoning need nothing;
- ``gemini/``, ``vertex_ai/``: ``reasoning_effort="none"``, which litellm sends as thinking
  budget 0 (Gemini 2.x Flash and Flash-Lite); Gemini 2.5 Pro refuses a zero budget and litellm
  maps every Gemini 3+ model to a thinking level, so these get the minimal level;
- ``anthropic/``: ``thinking={"type": "disabled"}`` (thinking is opt-in on Claude);
- ``openrouter/``: ``reasoning={"effort": "none"}``, OpenRouter's unified control, with the
  routed vendor's limits above for ``google/``, ``openai/`` and ``anthropic/`` models (their
  lowest effort where they refuse "none"); other vendors are unverified (the Finger paper met two
  endpoints that refused to disable reasoning);
- anything else: ``reasoning_effort="none"``, unverified.

Where reasoning cannot be disabled, or countgym cannot tell, ``ReasoningRequest.disabled`` is
False or None, the note says why, and the backend records both in its provider parameters and
warns once per model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

ReasoningMode = Literal["low", "off", "default", "on"]
MODES: tuple[str, ...] = ("low", "off", "default", "on")
LOCAL_PROVIDERS = ("hosted_vllm",)


@dataclass(frozen=True)
class ReasoningRequest:
    """The request parameters that set reasoning for one model, and what they achieve."""

    mode: str
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for ``litellm.completion``."""
    disabled: bool | None = None
    """Mode "off" only: True when these parameters disable reasoning, False when the endpoint
    cannot have it disabled (the lowest effort is sent instead), None when countgym cannot tell."""
    note: str = ""
    """One line: what is sent and why (empty when there is nothing to say)."""

    def loggable(self) -> dict[str, Any]:
        """The fields worth writing into the episode's provider parameters."""
        out: dict[str, Any] = {"reasoning": self.mode, "reasoning_params": dict(self.params)}
        if self.mode == "off":
            out["reasoning_disabled"] = self.disabled
        if self.note:
            out["reasoning_note"] = self.note
        return out


def split_model(model: str) -> tuple[str, str]:
    """(provider, model name) of a litellm id: ``openrouter/google/gemini-2.5-flash`` ->
    ("openrouter", "google/gemini-2.5-flash"); an id without a prefix has provider ""."""
    provider, sep, name = model.partition("/")
    return (provider.lower(), name) if sep else ("", model)


def reasoning_request(
    model: str, mode: str, *, api_base: str | None = None, max_tokens: int | None = None
) -> ReasoningRequest:
    """The parameters that put ``model`` in reasoning ``mode``."""
    if mode not in MODES:
        from countgym.errors import UserError

        raise UserError(f"reasoning mode must be one of {', '.join(MODES)}, got {mode!r}")
    provider, name = split_model(model)
    # An openai/ id with an api_base is an OpenAI-compatible server (vLLM, SGLang, ...).
    local = provider in LOCAL_PROVIDERS or (provider == "openai" and api_base is not None)
    if mode == "default":
        return ReasoningRequest(mode)
    if mode == "low":
        return ReasoningRequest(mode, {"reasoning_effort": "low"})
    if mode == "on":
        return _on(provider, name, local, max_tokens)
    return _off(provider, name, local)


def _on(provider: str, name: str, local: bool, max_tokens: int | None) -> ReasoningRequest:
    if local:
        return ReasoningRequest("on", {"chat_template_kwargs": {"enable_thinking": True}})
    if provider == "anthropic":
        # Claude thinks only when asked; the budget must stay below max_tokens.
        cap = max_tokens or 16384
        budget = max(1024, cap - 1024)
        return ReasoningRequest(
            "on", {"thinking": {"type": "enabled", "budget_tokens": budget}},
            note=f"thinking enabled with budget_tokens={budget} (Claude thinks only when asked)",
        )
    if provider == "openrouter":
        return ReasoningRequest("on", {"reasoning": {"enabled": True}})
    return ReasoningRequest("on", note="provider default reasoning (no reasoning parameter sent)")


def _off(provider: str, name: str, local: bool) -> ReasoningRequest:
    if local:
        return ReasoningRequest(
            "off", {"chat_template_kwargs": {"enable_thinking": False}}, disabled=True,
            note="chat template switch enable_thinking=False",
        )
    base = name.rsplit("/", 1)[-1].lower()
    if provider == "anthropic":
        if _model_info(f"anthropic/{name}").get("thinking_always_on"):
            return ReasoningRequest("off", disabled=False, note=f"{name}: thinking is always on")
        return ReasoningRequest("off", {"thinking": {"type": "disabled"}}, disabled=True)
    if provider in ("gemini", "vertex_ai"):
        if _gemini_cannot_disable(base, via_openrouter=False):
            return ReasoningRequest(
                "off", {"reasoning_effort": "minimal"}, disabled=False,
                note=f"{name}: thinking cannot be turned off through this API: minimal thinking sent instead",
            )
        return ReasoningRequest(
            "off", {"reasoning_effort": "none"}, disabled=True, note="thinking budget 0"
        )
    if provider == "openai":
        return _openai_off(name)
    if provider == "openrouter":
        return _openrouter_off(name)
    return ReasoningRequest(
        "off", {"reasoning_effort": "none"}, disabled=None,
        note=f"reasoning_effort none sent; countgym cannot tell whether {provider or 'this'} "
        "endpoint honours it (check reasoning_tokens)",
    )


def _openrouter_off(name: str) -> ReasoningRequest:
    """OpenRouter's ``reasoning`` object, with the routed vendor's limits (``vendor/model``)."""
    vendor, _, inner = name.partition("/")
    if vendor == "google" and _gemini_cannot_disable(inner.lower(), via_openrouter=True):
        return ReasoningRequest(
            "off", {"reasoning": {"effort": "minimal"}}, disabled=False,
            note=f"{inner} refuses to disable reasoning: minimal effort sent instead",
        )
    if vendor == "google":
        return ReasoningRequest("off", {"reasoning": {"effort": "none"}}, True, "OpenRouter reasoning effort none")
    if vendor in ("openai", "anthropic"):
        routed = _off(vendor, inner, False)
        effort = routed.params.get("reasoning_effort")
        if routed.disabled is False and effort:
            return ReasoningRequest("off", {"reasoning": {"effort": effort}}, False, routed.note)
        if routed.disabled is True:
            return ReasoningRequest("off", {"reasoning": {"effort": "none"}}, True,
                                    "OpenRouter reasoning effort none")
    return ReasoningRequest(
        "off", {"reasoning": {"effort": "none"}}, disabled=None,
        note=f"OpenRouter reasoning effort none; countgym cannot tell whether {name} honours it "
        "(check reasoning_tokens)",
    )


def _openai_off(name: str) -> ReasoningRequest:
    info = _model_info(f"openai/{name}")
    if not info:
        return ReasoningRequest(
            "off", {"reasoning_effort": "none"}, disabled=None,
            note=f"{name} is not in litellm's model map: reasoning_effort none sent, unverified",
        )
    if not info.get("supports_reasoning"):
        return ReasoningRequest("off", disabled=True, note=f"{name} does not reason")
    accepts_none = info.get("supports_none_reasoning_effort")
    if accepts_none:
        return ReasoningRequest("off", {"reasoning_effort": "none"}, disabled=True)
    if accepts_none is None and not re.match(r"o\d", name):
        return ReasoningRequest(
            "off", {"reasoning_effort": "none"}, disabled=None,
            note=f"litellm does not know whether {name} accepts reasoning_effort none: sent, unverified",
        )
    lowest = "minimal" if info.get("supports_minimal_reasoning_effort") else "low"
    return ReasoningRequest(
        "off", {"reasoning_effort": lowest}, disabled=False,
        note=f"{name} accepts no reasoning_effort none: the lowest effort ({lowest}) sent instead",
    )


_GEMINI_VERSION = re.compile(r"gemini-(\d+)(?:\.(\d+))?")


def _gemini_cannot_disable(base: str, *, via_openrouter: bool) -> bool:
    """Gemini 2.5 Pro and the Gemini 3+ Pro and Flash models refuse to disable thinking; through
    the Gemini API litellm sends a thinking level, never a zero budget, to every Gemini 3+ model.
    Flash-Lite through OpenRouter can be disabled (Give the Model a Finger, App. G)."""
    m = _GEMINI_VERSION.search(base)
    if m is None:
        return False
    major = int(m.group(1))
    if major >= 3:
        return not (via_openrouter and "flash-lite" in base)
    return major == 2 and m.group(2) == "5" and "pro" in base


def _model_info(model: str) -> dict[str, Any]:
    """litellm's model-map entry for ``model`` ({} when unknown); never raises."""
    from countgym.agents.backends.litellm_import import load_litellm as _litellm

    try:
        return dict(_litellm().get_model_info(model))
    except Exception:  # ModelNotMappedError and friends: unknown model
        return {}
