"""Built-in policies by name, and the bridge from a cell's agent to its environment options.

Scripted policies live here by name; model arms come in families (``ArmFamily``) that their
own modules declare and ``countgym.registration.ARM_FAMILIES`` lists. Every agent says which
tasks it runs on: a family's ``tasks``, or a policy class's ``tasks`` attribute (a plug-in
without one runs on any task). ``cell_env_options`` gives the environment options of an agent
on an environment with ablations applied, and ``policy_factory`` the per-episode policy
constructor of a cell (one shared backend per cell).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import cache
from typing import Any

from countgym.agents.base import ArmFamily, policy_class
from countgym.agents.scripted import BlobCounter, NoisyCounter, NoisyPointer, Oracle
from countgym.errors import UserError

BUILTIN_POLICIES: dict[str, Callable[..., Any]] = {
    "oracle": Oracle,
    "noisy-pointer": NoisyPointer,
    "blob-counter": BlobCounter,
    "noisy-counter": NoisyCounter,
}
SCRIPTED = frozenset(BUILTIN_POLICIES)
# Options that change the environment rather than the arm.
ENV_ONLY = ("reward", "tool_cost")


@cache
def arm_families() -> tuple[ArmFamily, ...]:
    """The registered families of model arms."""
    from countgym.registration import ARM_FAMILIES

    out = []
    for entry in ARM_FAMILIES:
        module, _, attr = entry.partition(":")
        out.append(getattr(importlib.import_module(module), attr))
    return tuple(out)


def family_of(agent: str) -> ArmFamily | None:
    """The family of a built-in model arm, or None for any other agent."""
    return next((f for f in arm_families() if f.is_arm(agent)), None)


def model_arms() -> list[str]:
    """The names of every built-in model arm (for messages)."""
    return [n for f in arm_families() for n in f.names()]


def is_model_arm(agent: str) -> bool:
    """True for the built-in arms that call a model (direct, cot, list, tag, ..., cf-mcq, ...)."""
    return family_of(agent) is not None


def check_agent_name(agent: str) -> None:
    """Unknown built-in names fail here with the list of valid ones (plug-ins are checked on load)."""
    if ":" in agent or agent in BUILTIN_POLICIES or is_model_arm(agent):
        return
    for fam in arm_families():
        if fam.check_name is not None:
            fam.check_name(agent)
    names = sorted([*BUILTIN_POLICIES, *model_arms()])
    raise UserError(f"unknown agent {agent!r}: use one of {', '.join(names)} or package.module:ClassName")


def agent_tasks(agent: str) -> tuple[str, ...] | None:
    """The tasks an agent runs on; None when it runs on any (a plug-in that does not say)."""
    fam = family_of(agent)
    if fam is not None:
        return fam.tasks
    cls = BUILTIN_POLICIES.get(agent) or (policy_class(agent) if ":" in agent else None)
    tasks = getattr(cls, "tasks", None)
    if tasks is None:
        return None
    return (tasks,) if isinstance(tasks, str) else tuple(tasks)


def runs_on(agent: str, task: str) -> bool:
    """True when ``agent`` runs on ``task``."""
    tasks = agent_tasks(agent)
    return tasks is None or task in tasks


def check_agent_task(agent: str, task: str, env_id: str) -> None:
    """A ``UserError`` (one line, before any episode) when ``agent`` does not run on ``task``."""
    if runs_on(agent, task):
        return
    tasks = agent_tasks(agent) or ()
    fits = sorted(n for f in arm_families() if task in f.tasks for n in f.names())
    fits += sorted(n for n, c in BUILTIN_POLICIES.items() if task in (getattr(c, "tasks", None) or (task,)))
    raise UserError(
        f"agent {agent!r} runs on the {'/'.join(tasks)} task, but {env_id} is the {task} task: "
        f"use one of {', '.join(fits) or 'your own policy'} or package.module:ClassName there"
    )


def base_env_options(agent: str) -> dict[str, Any]:
    """The environment options a built-in arm needs before any override ({} for other agents)."""
    fam = family_of(agent)
    return fam.env_options(agent) if fam is not None else {}


MODEL_VIEW_KEYS = frozenset({"verify", "numbered", "order", "prompt", "protocol", "thinking"})
"""Options that change only what a model reads or how it is called: nothing a scripted policy
(which reads no message and calls no model) does."""


def agent_takes(agent: str, env_cls: type) -> frozenset[str]:
    """The option keys (``tools``, ``budget``, ablation keys, ``thinking``) that change what
    ``agent`` sends or does on ``env_cls``'s task: a built-in arm's family says
    (``ArmFamily.takes``); a plug-in takes every option the environment takes; a scripted
    policy those that change the environment's behaviour (not what a model would read)."""
    env_keys = frozenset(getattr(env_cls, "CELL_OPTIONS", ()))
    fam = family_of(agent)
    if fam is not None:
        return fam.takes(agent) & (env_keys | {"thinking"}) if fam.takes is not None else env_keys | {"thinking"}
    if agent in BUILTIN_POLICIES:
        return env_keys - MODEL_VIEW_KEYS
    return env_keys - {"thinking"}  # a plug-in: its own options come through agent_options


def cell_env_options(
    agent: str,
    env_cls: type | None = None,
    *,
    tools: list[str] | None = None,
    budget: int | None = None,
    **ablations: Any,
) -> dict[str, Any]:
    """Environment options of ``agent`` with ablations and explicit tools/budget applied: the
    arm family's own options for a built-in model arm, else the environment class's
    ``cell_options`` (``env_cls``; the image tool loop's when None, as before tasks existed)."""
    env_only = {k: ablations.pop(k) for k in ENV_ONLY if k in ablations}
    fam = family_of(agent)
    if fam is not None:
        opts = fam.env_options(agent, tools=tools, budget=budget, **ablations)
    else:
        if env_cls is None:
            from countgym.registration import TASKS
            from countgym.tasks import env_class

            env_cls = env_class(list(TASKS.values())[-1].default_env)
        opts = env_cls.cell_options(tools=tools, budget=budget, **ablations)  # type: ignore[attr-defined]
    opts.update(env_only)
    return opts


def audit_hooks() -> dict[str, Any]:
    """The audit's task-specific keyword arguments, from every arm family that has some."""
    hooks: dict[str, Any] = {}
    for fam in arm_families():
        hooks.update(fam.audit_hooks)
    return hooks


def load_policy(spec: str, **kwargs: Any) -> Any:
    """Instantiate a policy from a built-in name or ``package.module:ClassName``."""
    if spec in BUILTIN_POLICIES:
        try:
            return BUILTIN_POLICIES[spec](**kwargs)
        except (TypeError, ValueError) as e:
            raise UserError(f"invalid --agent-option for {spec!r}: {_option_error(e)}") from None
    if ":" not in spec:
        names = ", ".join(sorted(BUILTIN_POLICIES))
        raise UserError(f"unknown agent {spec!r}: use one of {names} or package.module:ClassName")
    cls = policy_class(spec)
    try:
        policy = cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise UserError(f"cannot construct agent {spec!r} with these options: {_option_error(e)}") from None
    if not (hasattr(policy, "reset") and hasattr(policy, "act")):
        raise UserError(
            f"agent {spec!r} has no reset(first_observation, task) and act(observation)"
        )
    return policy


def _option_error(e: Exception) -> str:
    """A constructor's complaint about its options, without the class-qualified prefix."""
    text = str(e)
    if "unexpected keyword argument" in text:
        name = text.rsplit("argument", 1)[-1].strip()
        return f"unknown option {name}"
    return text


def check_arm_model(agent: str, model: str = "") -> None:
    """Refuse, with one line, a model arm without a model or with an id no backend serves.

    Cheap (loads no backend, builds no dataset), so runs and sweeps call it first.
    """
    if family_of(agent) is None:
        return
    if not model:
        raise UserError(
            f"arm {agent!r} calls a model: pass --model (e.g. openai/gpt-4o-mini or hf:/path)"
        )
    from countgym.agents.backends.factory import check_model_id

    check_model_id(model)


def check_backend_options(agent: str, model: str, options: dict[str, Any] | None) -> None:
    """Refuse, with one line and without building a backend, option names an API model's backend
    does not take and values outside their range (``timeout_s=-1``, ``max_attempts=0``, a
    negative or non-finite price), and a hosted provider's model with no key in the environment
    (``providers.missing_key``). Local models' options are checked when they load."""
    import inspect

    if family_of(agent) is None or not model:
        return
    from countgym.agents.backends.factory import check_model_id

    if check_model_id(model) != "litellm":
        return
    from countgym.agents.backends import litellm_backend as lb

    opts = {k: v for k, v in (options or {}).items() if k != "attention"}  # CounterCount's own
    try:
        inspect.signature(lb.LiteLLMBackend).bind(model, **opts)
    except TypeError as e:
        raise UserError(f"invalid backend option for {model!r}: {e}") from None
    lb._check_options(**{k: v for k, v in opts.items() if k in lb.CHECKED_OPTIONS})
    from countgym.agents.backends.providers import missing_key

    no_key = missing_key(model, opts)
    if no_key:
        raise UserError(no_key)


def policy_factory(
    agent: str, model: str = "", options: dict[str, Any] | None = None, *, concurrency: int = 1
) -> Callable[[], Any]:
    """A constructor of fresh per-episode policies for a cell.

    Model arms share one backend (connection pool, loaded weights) across all episodes; their
    ``options`` are backend options (``api_base``, ``max_tokens``, prices, ``thinking``, ...).
    A local model run with ``concurrency > 1`` gets a ``BatchingBackend``, so the concurrent
    episodes' turns are generated as batches.
    """
    options = dict(options or {})
    fam = family_of(agent)
    if fam is not None:
        if not model:
            raise UserError(
                f"arm {agent!r} calls a model: pass --model (e.g. openai/gpt-4o-mini or hf:/path)"
            )
        try:
            backend = fam.backend(agent, model, **options)
        except (TypeError, ValueError) as e:  # an unknown option, or a value the backend refuses
            raise UserError(f"invalid backend option for {model!r}: {e}") from None
        provider = _provider_params(backend)
        if concurrency > 1 and model.startswith(("hf:", "local:")):
            from countgym.agents.backends.batching import BatchingBackend

            backend = BatchingBackend(backend, max_batch=concurrency)
        return _with_provider(lambda: fam.policy(agent, backend), provider)
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
