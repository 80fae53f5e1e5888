"""Built-in policies by name: scripted policies and the model-backed baseline arms.

``cell_env_options`` gives the environment options of an agent with ablations applied, and
``policy_factory`` the per-episode policy constructor of a cell (one shared backend per cell).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from countgym.agents.scripted import BlobCounter, NoisyPointer, Oracle
from countgym.errors import UserError

BUILTIN_POLICIES: dict[str, Callable[..., Any]] = {
    "oracle": Oracle,
    "noisy-pointer": NoisyPointer,
    "blob-counter": BlobCounter,
}
SCRIPTED = frozenset(BUILTIN_POLICIES)
# Options that change the environment rather than the arm.
ENV_ONLY = ("reward", "tool_cost")


def model_arms() -> dict[str, Any]:
    """The baseline arms of the image study (they need a model)."""
    from countgym.agents.arms import ARMS

    return ARMS


def is_model_arm(agent: str) -> bool:
    """True for the built-in arms that call a model (direct, cot, list, tag, ..., cf-mcq, ...)."""
    from countgym.agents.cf_arm import is_cf_arm
    from countgym.agents.video_arm import is_video_arm

    return agent in model_arms() or is_cf_arm(agent) or is_video_arm(agent)


def cell_env_options(
    agent: str, *, tools: list[str] | None = None, budget: int | None = None, **ablations: Any
) -> dict[str, Any]:
    """Environment options of ``agent`` with ablations (verify, numbered, order, perturb,
    extra_tools, thinking, reward, tool_cost) and explicit tools/budget applied."""
    env_only = {k: ablations.pop(k) for k in ENV_ONLY if k in ablations}
    from countgym.agents.cf_arm import is_cf_arm, parse_cf_arm

    if is_cf_arm(agent):
        ablations.pop("thinking", None)  # part of the arm name (+think)
        bad = set(ablations) - {"blur_radius", "feather", "attention"}
        if bad or tools is not None or budget is not None:
            raise UserError(f"CounterCount arm {agent!r} takes only blur_radius, feather, attention; got {sorted(bad) or 'tools/budget'}")
        opts = parse_cf_arm(agent).env_options(**{k: v for k, v in ablations.items() if v is not None})
        opts.update(env_only)
        return opts
    from countgym.agents.video_arm import is_video_arm, video_env_options

    if is_video_arm(agent):
        if ablations or tools is not None or budget is not None:
            raise UserError(f"video arm {agent!r} takes no ablations (choose the prompt by arm: video-p1/p2/p3)")
        return {**video_env_options(agent), **env_only}
    if is_model_arm(agent):
        from countgym.agents.arms import arm_env_options

        try:
            opts = arm_env_options(agent, budget=budget, **ablations)
        except TypeError as e:
            raise UserError(f"invalid ablation for arm {agent!r}: {e}") from None
        opts["tools"] = list(opts["tools"])
    else:
        ablations.pop("thinking", None)
        extra = ablations.pop("extra_tools", ())
        unknown = set(ablations) - {
            "verify",
            "numbered",
            "order",
            "perturb",
            "one_point_per_call",
            "prompt",
        }
        if unknown:
            raise UserError(f"unknown option(s) {sorted(unknown)} for agent {agent!r}")
        opts = {"tools": ["tag", *extra], **{k: v for k, v in ablations.items() if v is not None}}
        if budget is not None:
            opts["budget"] = budget
    if tools is not None:
        opts["tools"] = list(tools)
    opts.update(env_only)
    return opts


def policy_factory(
    agent: str, model: str = "", options: dict[str, Any] | None = None, *, concurrency: int = 1
) -> Callable[[], Any]:
    """A constructor of fresh per-episode policies for a cell.

    Model arms share one backend (connection pool, loaded weights) across all episodes; their
    ``options`` are backend options (``api_base``, ``max_tokens``, prices, ``thinking``, ...).
    A local model run with ``concurrency > 1`` gets a ``BatchingBackend``, so the concurrent
    episodes' turns are generated as batches.
    """
    from countgym.agents.base import load_policy

    options = dict(options or {})
    if is_model_arm(agent):
        if not model:
            raise UserError(
                f"arm {agent!r} calls a model: pass --model (e.g. openai/gpt-4o-mini or hf:/path)"
            )
        from countgym.agents.arms import make_arm_policy
        from countgym.agents.backends import make_backend
        from countgym.agents.cf_arm import CFPolicy, is_cf_arm, make_cf_backend
        from countgym.agents.video_arm import is_video_arm, make_video_backend

        try:
            if is_cf_arm(agent):
                backend = make_cf_backend(agent, model, **options)
            elif is_video_arm(agent):
                backend = make_video_backend(model, **options)
            else:
                backend = make_backend(model, **options)
        except TypeError as e:
            raise UserError(f"invalid backend option for {model!r}: {e}") from None
        provider = _provider_params(backend)
        from countgym.agents.video_arm import VideoDirect

        if is_video_arm(agent):
            if concurrency > 1 and model.startswith(("hf:", "local:")):
                from countgym.agents.backends.batching import BatchingBackend

                backend = BatchingBackend(backend, max_batch=concurrency)
            return _with_provider(lambda: VideoDirect(backend), provider)
        if is_cf_arm(agent):
            if concurrency > 1 and model.startswith(("hf:", "local:")):
                from countgym.agents.backends.batching import BatchingBackend

                backend = BatchingBackend(backend, max_batch=concurrency)
            return _with_provider(lambda: CFPolicy(backend), provider)
        if concurrency > 1 and model.startswith(("hf:", "local:")):
            from countgym.agents.backends.batching import BatchingBackend

            backend = BatchingBackend(backend, max_batch=concurrency)
        return _with_provider(lambda: make_arm_policy(agent, backend), provider)
    load_policy(agent, **options)  # fail fast on a bad spec or option
    return lambda: load_policy(agent, **options)


def _provider_params(backend: Any) -> dict[str, Any] | None:
    """The backend's loggable provider parameters (model, temperature, max tokens, ...)."""
    for _ in range(4):  # look through wrappers (attention modulation, batching)
        params = getattr(backend, "provider_params", None)
        if callable(params):
            from countgym.logs import redact

            return redact(dict(params()))
        backend = getattr(backend, "inner", None)
        if backend is None:
            break
    return None


def _with_provider(factory: Callable[[], Any], provider: dict[str, Any] | None) -> Callable[[], Any]:
    factory.provider = provider  # type: ignore[attr-defined]
    return factory
