"""The CounterCount arms: one model call per image with the paper's single-step prompts.

An arm name is a question format plus any interventions, joined by ``+``::

    cf-mcq                 baseline, four-option multiple choice (the paper's main format)
    cf-oe                  baseline, open-ended completion
    cf-mcq+blur            blur outside the attribute box (radius 48, feathering 4)
    cf-mcq+cue             the cue instruction before the question
    cf-mcq+generic         generic subject name ("animal", "object", ...)
    cf-mcq+think           thinking mode on (backend options: sampled, 16,384-token budget)
    cf-mcq+attn            attention modulation on the Mask-BB tokens (local models only)

Interventions combine (``cf-oe+blur+cue``). Environment options go to ``CounterCountEnv``;
backend options to the model backend (``CFArm.backend_options``: reasoning disabled, greedy,
128 output tokens; with ``+think`` thinking on, sampling with the model's defaults, 16,384).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from countgym.agents.backends.base import ChatModel, image_part, message, text_part
from countgym.agents.backends.factory import make_backend
from countgym.agents.base import ArmFamily
from countgym.envs.actions import Reply
from countgym.errors import UserError

FORMATS: tuple[str, ...] = ("mcq", "oe")
INTERVENTIONS: tuple[str, ...] = ("blur", "cue", "generic", "think", "attn")
MAX_TOKENS = 128
"""Output cap without thinking (Section 3)."""
MAX_TOKENS_THINKING = 16384
"""Thinking budget (Section 4.1.4)."""


@dataclass(frozen=True)
class CFArm:
    """A CounterCount arm: question format and interventions."""

    format: str = "mcq"
    interventions: frozenset[str] = field(default_factory=frozenset)

    @property
    def name(self) -> str:
        """Canonical arm name (interventions in a fixed order)."""
        return "+".join([f"cf-{self.format}", *(i for i in INTERVENTIONS if i in self.interventions)])

    def env_options(self, *, blur_radius: float = 48.0, feather: float = 4.0,
                    attention: str | None = None) -> dict[str, Any]:
        """Options for ``CounterCountEnv`` (``attention`` names the modulation config logged)."""
        return {
            "question": self.format,
            "cue": "cue" in self.interventions,
            "generic": "generic" in self.interventions,
            "blur": "blur" in self.interventions,
            "blur_radius": float(blur_radius),
            "feather": float(feather),
            "thinking": "think" in self.interventions,
            "attention": (attention or "default") if "attn" in self.interventions else None,
            "expose_region": "attn" in self.interventions,
        }

    def backend_options(self, model: str) -> dict[str, Any]:
        """Backend options for a model id, as the paper decodes.

        Baseline (Section 3.1): reasoning disabled, 128 output tokens, greedy (temperature 0 for
        API models). Thinking mode (Section 4.1.4, App. C.7): thinking on through the chat
        template, 16,384 tokens, sampling with each model's default generation parameters (the
        checkpoint's generation config locally; no temperature sent to an API).
        """
        thinking = "think" in self.interventions
        cap = MAX_TOKENS_THINKING if thinking else MAX_TOKENS
        if model.startswith(("hf:", "local:")):
            return {"thinking": thinking, "max_new_tokens": cap,
                    "decoding": "sample" if thinking else "greedy"}
        if thinking:
            return {"reasoning": "on", "temperature": None, "max_tokens": cap}
        return {"reasoning": "off", "temperature": 0.0, "max_tokens": cap}


def parse_cf_arm(name: str) -> CFArm:
    """``cf-mcq+blur+cue`` -> ``CFArm``; unknown parts raise ``UserError`` listing valid ones."""
    head, *mods = str(name).split("+")
    if not head.startswith("cf-") or head[3:] not in FORMATS:
        raise UserError(f"unknown CounterCount arm {name!r}: use cf-mcq or cf-oe, optionally +{'+'.join(INTERVENTIONS)}")
    bad = [m for m in mods if m not in INTERVENTIONS]
    if bad:
        raise UserError(f"unknown intervention(s) {bad} in {name!r}: choose from {', '.join(INTERVENTIONS)}")
    return CFArm(head[3:], frozenset(mods))


def is_cf_arm(name: str) -> bool:
    """True for names of the form ``cf-mcq[+...]`` / ``cf-oe[+...]``."""
    try:
        parse_cf_arm(name)
    except UserError:
        return False
    return True


class CFPolicy:
    """Sends the image and question as one user message and returns the model's reply.

    With a backend that accepts regions (``AttentionModulatedBackend``), the observation's
    ``region`` (Mask-BB) travels along as a ``{"type": "region"}`` part; other backends never
    see it.
    """

    def __init__(self, model: ChatModel | str, **backend_options: Any) -> None:
        if isinstance(model, str):
            model = make_backend(model, **backend_options)
        elif backend_options:
            raise TypeError("backend options are for a model id; configure a ChatModel instance directly")
        self.model = model

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        """Nothing to remember: the task is a single question."""

    def request(self, observation: dict[str, Any]) -> list[dict[str, Any]]:
        """The one-message conversation for an observation."""
        parts = [image_part(observation["image"]), text_part(str(observation.get("text", "")))]
        if _accepts_region(self.model) and observation.get("region") is not None:
            parts.append({"type": "region", "mask": observation["region"]})
        return [message("user", *parts)]

    def act(self, observation: dict[str, Any]) -> Reply:
        """One model call."""
        return self.model.complete(self.request(observation))

    def act_batch(self, observations: list[dict[str, Any]]) -> list[Reply]:
        """One batched call for several episodes (local models generate them together)."""
        return self.model.complete_batch([self.request(o) for o in observations])


def _accepts_region(model: Any) -> bool:
    """True when the backend, or one it wraps (``BatchingBackend.inner``), takes region parts."""
    for _ in range(4):  # wrappers nest shallowly; the bound guards against cycles
        if model is None:
            return False
        if getattr(model, "accepts_region", False):
            return True
        model = getattr(model, "inner", None)
    return False


def make_cf_backend(arm: str | CFArm, model: str, **backend_options: Any) -> ChatModel:
    """The backend a CounterCount arm runs on, to share across a cell's episodes: the arm's
    backend options (explicit ones override them), wrapped for attention modulation on ``+attn``
    (``attention="a2-b0-middle"`` picks the configuration)."""
    spec = arm if isinstance(arm, CFArm) else parse_cf_arm(arm)
    opts = {**spec.backend_options(model), **backend_options}
    attention = opts.pop("attention", None)
    backend: ChatModel = make_backend(model, **opts)
    if "attn" in spec.interventions:
        from countgym.agents.internals import AttentionModulatedBackend

        backend = AttentionModulatedBackend(backend, attention)
    return backend


def make_cf_policy(arm: str | CFArm, model: ChatModel | str, **backend_options: Any) -> CFPolicy:
    """A policy for a CounterCount arm over a ``ChatModel``, or over a model id (then built with
    ``make_cf_backend``)."""
    if isinstance(model, str):
        return CFPolicy(make_cf_backend(arm, model, **backend_options))
    if not isinstance(arm, CFArm):
        parse_cf_arm(arm)  # validates the name
    return CFPolicy(model, **backend_options)


# --- the family, as the registry lists it ----------------------------------------------------------
def _family_env_options(
    arm: str, *, tools: Any = None, budget: int | None = None, **ablations: Any
) -> dict[str, Any]:
    ablations.pop("thinking", None)  # part of the arm name (+think)
    kind = ablations.pop("kind", None)
    bad = set(ablations) - {"blur_radius", "feather", "attention"}
    if bad or tools is not None or budget is not None:
        raise UserError(
            f"CounterCount arm {arm!r} takes only blur_radius, feather, attention, kind; "
            f"got {sorted(bad) or 'tools/budget'}"
        )
    opts = parse_cf_arm(arm).env_options(**{k: v for k, v in ablations.items() if v is not None})
    if kind is not None:
        opts["kind"] = kind
    return opts


def cf_takes(arm: str) -> frozenset[str]:
    """The option keys that change what a CounterCount arm sends or scores: ``kind`` and the
    reward always, the blur geometry with ``+blur``, the attention configuration with ``+attn``.
    The question format and the interventions (``+think`` included) are the arm's name."""
    spec = parse_cf_arm(arm)
    keys = {"kind", "reward"}
    if "blur" in spec.interventions:
        keys |= {"blur_radius", "feather"}
    if "attn" in spec.interventions:
        keys.add("attention")
    return frozenset(keys)


def _check_name(name: str) -> None:
    if name.startswith("cf-"):
        parse_cf_arm(name)  # raises a UserError naming the valid format and interventions


def baseline_judge(model: str, api_base: str | None) -> Any:
    """The CounterCount judge of *CounterCount* Section 3: the run's own model in its baseline
    configuration (the baseline arm's decoding, the run's endpoint). An API judge retries
    briefly, so an endpoint that is gone cannot stall an audit."""
    options: dict[str, Any] = {"api_base": api_base} if api_base else {}
    if not model.startswith(("hf:", "local:")):
        options.update(max_attempts=2, max_total_wait_s=10.0, timeout_s=60.0)
    return make_cf_backend("cf-mcq", model, **options)


ARM_FAMILY = ArmFamily(
    tasks=("countercount",),
    is_arm=is_cf_arm,
    names=lambda: ["cf-mcq[+...]", "cf-oe[+...]"],
    env_options=_family_env_options,
    backend=make_cf_backend,
    policy=lambda arm, backend: CFPolicy(backend),
    check_name=_check_name,
    takes=cf_takes,
    audit_hooks={"judge_backend": baseline_judge},
)
"""The CounterCount arms (format plus interventions)."""
