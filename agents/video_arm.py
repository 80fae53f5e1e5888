"""The video arm: the sampled frames as a sequence of images, then the question, in one call.

*CountVideoBench* evaluates every model zero-shot on the 10 uniformly sampled frames with one
question and no other instruction (Section 5.1). This policy builds that request for any
``ChatModel``-like object (``complete(messages) -> Reply``) and returns the model's raw reply;
the environment extracts the count. Messages are OpenAI-style with content parts
``{"type": "image", "image": uint8 H x W x 3}`` and ``{"type": "text", "text": ...}``; a frame the
environment holds as its stored file (``countgym.envs.frames.StoredFrame``) stays that object, so
a backend that sends data URLs sends the stored bytes and nothing is decoded.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from countgym.agents.base import ArmFamily
from countgym.envs.actions import Reply
from countgym.envs.frames import StoredFrame


class _Completes(Protocol):
    def complete(self, messages: list[dict[str, Any]]) -> Reply: ...


def video_messages(
    frames: Any, question: str, *, frame_labels: bool = False, system: str | None = None
) -> list[dict[str, Any]]:
    """One user message: every frame as an image part (time order), then the question.

    ``frames``: a T x H x W x 3 array or the environment's ``FrameStack``. ``frame_labels`` puts
    "Frame k of T:" before each image (off in the paper's protocol).
    """
    parts: list[dict[str, Any]] = []
    t = len(frames)
    for k, frame in enumerate(frames):
        if frame_labels:
            parts.append({"type": "text", "text": f"Frame {k + 1} of {t}:"})
        parts.append({"type": "image", "image": frame if isinstance(frame, StoredFrame) else np.asarray(frame)})
    parts.append({"type": "text", "text": question})
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
    messages.append({"role": "user", "content": parts})
    return messages


class VideoDirect:
    """Single-call video arm (``direct`` for the video environment).

    ``model``: a ``ChatModel``-like object, or a model id for ``agents.backends.make_backend``
    (extra keyword arguments go to the backend). ``frame_labels`` and ``system`` are ablation
    options, off by default as in the paper.
    """

    name = "video-direct"

    def __init__(
        self,
        model: _Completes | str,
        *,
        frame_labels: bool = False,
        system: str | None = None,
        **backend_options: Any,
    ) -> None:
        self.model: _Completes = make_video_backend(model, **backend_options) if isinstance(model, str) else model
        self.frame_labels = frame_labels
        self.system = system
        self._first: dict[str, Any] | None = None

    def reset(self, first_observation: dict[str, Any], task: Any = None) -> None:
        """Remember the first observation (frames + question); the task is not needed."""
        self._first = first_observation

    def act(self, observation: dict[str, Any]) -> Reply:
        """Ask the model once; the reply goes to the environment unparsed."""
        obs = observation if observation.get("text") else self._first
        if obs is None:
            raise RuntimeError("reset() first")
        messages = video_messages(
            obs["frames"], obs["text"], frame_labels=self.frame_labels, system=self.system
        )
        return self.model.complete(messages)

    def options(self) -> dict[str, Any]:
        """The arm's options as logged."""
        return {"frame_labels": self.frame_labels, "system": self.system}


# --- arm names used by the runner, sweeps and configs -------------------------------------------
VIDEO_ARMS: dict[str, str] = {"video-direct": "P1", "video-p1": "P1", "video-p2": "P2", "video-p3": "P3"}
"""Video arm -> prompt of CountVideoBench (P1 the main question; P2/P3 the robustness variants)."""


def is_video_arm(name: str) -> bool:
    """True for the CountVideoBench arms."""
    return name in VIDEO_ARMS


MAX_TOKENS = 1024
"""Decoding budget for every model, API models included (CountVideoBench, Section 5.1)."""


def video_backend_options(model: str) -> dict[str, Any]:
    """Backend options of the video arms: ``max_tokens=1024`` for every model (Section 5.1).

    The paper states no other decoding parameter. Local models decode greedily; API models get
    temperature 0 and no reasoning parameter (the provider's own reasoning setting), so the only
    stated budget is the one sent.
    """
    if model.startswith(("hf:", "local:")):
        return {"max_new_tokens": MAX_TOKENS}
    return {"max_tokens": MAX_TOKENS, "reasoning": "default"}


def make_video_backend(model: str, **backend_options: Any) -> Any:
    """The backend a video arm runs on: the arm's options, explicit ones overriding them."""
    from countgym.agents.backends.factory import make_backend

    return make_backend(model, **{**video_backend_options(model), **backend_options})


def video_env_options(name: str) -> dict[str, Any]:
    """The ``CountVideoEnv`` options of a video arm."""
    return {"prompt": VIDEO_ARMS[name]}


def _family_env_options(
    arm: str, *, tools: Any = None, budget: int | None = None, **ablations: Any
) -> dict[str, Any]:
    ablations = {k: v for k, v in ablations.items() if v is not None}
    ablations.pop("thinking", None)
    max_side = ablations.pop("max_side", None)
    if ablations or tools is not None or budget is not None:
        from countgym.errors import UserError

        raise UserError(f"video arm {arm!r} takes only max_side (choose the prompt by arm: video-p1/p2/p3)")
    opts = video_env_options(arm)
    if max_side is not None:
        opts["max_side"] = max_side
    return opts


def video_takes(arm: str) -> frozenset[str]:
    """The option keys that change what a video arm sends or scores (the prompt is its name)."""
    return frozenset({"max_side", "reward", "thinking"})


def _family_backend(arm: str, model: str, **options: Any) -> Any:
    return make_video_backend(model, **options)


ARM_FAMILY = ArmFamily(
    tasks=("video",),
    is_arm=is_video_arm,
    names=lambda: sorted(VIDEO_ARMS),
    env_options=_family_env_options,
    backend=_family_backend,
    policy=lambda arm, backend: VideoDirect(backend),
    takes=video_takes,
)
"""The CountVideoBench arms (one call per video; the prompt by arm name)."""
