"""What both verifiers adapters (0.3's ``vf_classic``, 0.4's ``vf_v1``) do alike, without
importing verifiers: the environment's answer to a model turn as chat messages, the context
policy on those messages, and an episode's rewards, counts and record when it ends."""

from __future__ import annotations

from typing import Any

from countgym.agents.backends.base import image_part, message, text_part
from countgym.agents.backends.litellm_backend import to_openai_messages
from countgym.agents.context import KEEP_IMAGES, apply_context_policy
from countgym.envs import native_tools as NT
from countgym.envs.actions import Reply
from countgym.envs.image_env import CountImageEnv
from countgym.envs.rewards import resolve_reward

REWARDS = ("exact", "neg_abs_error", "audit")
"""countgym's built-in rewards, offered to verifiers' rubric (one weighted 1, the others 0)."""


def as_dict(x: Any) -> dict[str, Any]:
    """verifiers' typed messages and parts as plain dicts (wire format)."""
    if isinstance(x, dict):
        return x
    dump = getattr(x, "model_dump", None)
    return dump(exclude_none=True) if callable(dump) else {}


def next_turn(env: CountImageEnv, obs: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
    """The environment's reply as OpenAI chat messages: the image and message as a user turn,
    or with the native protocol a tool result for every call (the executed one the message, the
    rest a note)."""
    parts = [image_part(obs["image"]), text_part(obs["text"])]
    if env.protocol == "native" and reply.tool_calls:
        turns = [
            {"role": "tool", "tool_call_id": c["id"],
             "content": parts if k == 0 else [text_part(NT.NATIVE_EXTRA_CALL)]}
            for k, c in enumerate(reply.tool_calls)
        ]
    else:
        turns = [message("user", *parts)]
    return to_openai_messages(turns)


def prune_images(messages: list[Any], keep: int = KEEP_IMAGES) -> list[dict[str, Any]]:
    """The context policy on OpenAI-format messages (plain or verifiers' typed ones): the ``keep``
    most recent image parts stay, earlier ones become the text ``[image shown earlier omitted]``."""
    plain = []
    for msg in messages:
        m = as_dict(msg)
        content = m.get("content")
        plain.append({**m, "content": [as_dict(p) for p in content]} if isinstance(content, list) else m)
    return apply_context_policy(plain, keep_images=keep, image_type="image_url")


def episode_outcome(env: CountImageEnv) -> dict[str, Any] | None:
    """An ended (or stopped) episode's ``countgym_rewards``, ``countgym_stats`` and
    ``countgym_record``; None when its reset failed (no state to score)."""
    st = env.state
    if st is None:
        return None
    stim = env._reward_stimulus()
    return {
        "countgym_rewards": {r: float(resolve_reward(r)(st, stim)) + 0.0 for r in REWARDS},
        "countgym_stats": {"tool_calls": st.tool_calls, "tags": len(st.tags), "answered": float(st.end == "answer")},
        "countgym_record": env.episode_record().model_dump(mode="json"),
    }
