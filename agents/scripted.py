"""Scripted policies that need no model.

``oracle`` and ``noisy-pointer`` are reference points that receive the ground-truth points
explicitly from the caller (``give_truth``), never from the environment. ``blob-counter`` looks
only at the pixels it is shown.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from countgym.agents.base import Task
from countgym.agents.blobs import detect_blobs
from countgym.envs.actions import Answer, Reply, Tag
from countgym.matching import tau_for

MAX_POINTS_PER_CALL = 100


class _TagThenAnswer:
    """Shared loop: tag a list of normalised points (100 per call), then answer a count."""

    name = "scripted"
    tasks: tuple[str, ...] = ("image",)
    """The tasks these policies run on: they answer by tagging points on an image."""

    def __init__(self) -> None:
        self.task: Task | None = None
        self._queue: list[tuple[float, float]] = []
        self._count = 0
        self._calls = 0
        self._done_tagging = False

    def reset(self, first_observation: dict[str, Any], task: Task) -> None:
        self.task = task
        self._calls = task.budget
        self._queue, self._count, self._done_tagging = [], 0, False
        points, count = self._plan(first_observation, task)
        self._queue = [(round(x, 1), round(y, 1)) for x, y in points]
        self._count = count
        if "tag" not in task.tools or not self._queue:
            self._done_tagging = True

    def act(self, observation: dict[str, Any]) -> Any:
        assert self.task is not None, "reset() first"
        if not self._done_tagging and self._calls > 0:
            per_call = 1 if self.task.options.get("one_point_per_call") else MAX_POINTS_PER_CALL
            batch, self._queue = self._queue[:per_call], self._queue[per_call:]
            self._calls -= 1
            if not self._queue:
                self._done_tagging = True
            return Tag(points=batch)
        return Answer(count=self._count)

    def _plan(self, obs: dict[str, Any], task: Task) -> tuple[list[tuple[float, float]], int]:
        raise NotImplementedError


class Oracle(_TagThenAnswer):
    """Tags every ground-truth point and answers the true count; the audit must score it perfectly.

    On a count-only stimulus (no points, e.g. PixMo-Count) it cannot point: it answers the true
    count without tagging and says so in its reply.
    """

    name = "oracle"
    uses_truth = True
    tasks: tuple[str, ...] = ("image", "video", "countercount")
    """On the image task it tags every point; on the single-step tasks it answers the count."""
    points_used = True
    """Told when a stimulus has no points to tag (a count-only image set)."""

    def __init__(self) -> None:
        super().__init__()
        self._truth: list[tuple[float, float]] | None = None
        self._n: int | None = None

    def give_truth(self, points_norm: list[tuple[float, float]] | None, n: int) -> None:
        """Receive the ground truth in the normalised frame (called by the runner);
        ``points_norm`` is None when the stimulus has a count but no points."""
        self._truth = None if points_norm is None else list(points_norm)
        self._n = n

    def reset(self, first_observation: dict[str, Any], task: Task) -> None:
        if self._n is None:
            raise RuntimeError(f"{self.name} needs the ground truth: call give_truth(points, n) before reset")
        super().reset(first_observation, task)

    def act(self, observation: dict[str, Any]) -> Any:
        action = super().act(observation)
        if self._truth is None and isinstance(action, Answer):
            text = "This image has no ground-truth points, so I cannot point; the true count is given."
            return Reply(text=f"{text} {action.model_dump_json()}", action=action)
        return action

    def _plan(self, obs: dict[str, Any], task: Task) -> tuple[list[tuple[float, float]], int]:
        assert self._n is not None
        return list(self._truth or []), self._n


class NoisyCounter:
    """A model-free answer-only baseline for every task: it states a noisy version of the true
    count and never points.

    The answer is ``round(n * (1 + bias) + Normal(0, sigma * n))``, at least 0 (the simulated
    model's answer-only rule); ``sigma=0, bias=0`` is an oracle count. ``seed`` with the
    runner's per-episode seed makes runs repeatable.
    """

    name = "noisy-counter"
    uses_truth = True
    points_used = False
    tasks = ("image", "video", "countercount")

    def __init__(self, sigma: float = 0.1, bias: float = 0.0, seed: int = 0) -> None:
        self.sigma, self.bias = _number("sigma", sigma), _number("bias", bias)
        if self.sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        if self.bias <= -1:
            raise ValueError(f"bias must be > -1 (a relative error), got {bias}")
        self.rng = np.random.default_rng(int(_number("seed", seed)))
        self._n: int | None = None

    def seed(self, seed: int) -> None:
        """Per-episode seeding (the runner calls this so results do not depend on run order)."""
        self.rng = np.random.default_rng(seed)

    def give_truth(self, points_norm: list[tuple[float, float]] | None, n: int) -> None:
        """Receive the true count (the points are not used)."""
        self._n = n

    def reset(self, first_observation: dict[str, Any], task: Task) -> None:
        if self._n is None:
            raise RuntimeError(f"{self.name} needs the ground truth: call give_truth(points, n) before reset")

    def act(self, observation: dict[str, Any]) -> Any:
        assert self._n is not None, "reset() first"
        n = self._n
        value = n * (1.0 + self.bias) + self.rng.normal(0.0, self.sigma * n) if n else 0.0
        count = max(0, int(round(value)))
        return Reply(text=f"ANSWER: {count}", action=Answer(count=count))


def _number(name: str, value: Any) -> float:
    """An option given as a number (``--agent-option sigma=3``); anything else is refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


class NoisyPointer(Oracle):
    """An oracle with injected errors whose rates the audit must recover.

    ``sigma``: pointing noise, thousandths of the image side (normalised units) per axis;
    ``omission``: probability an object is skipped; ``duplicate``: probability a tagged object
    gets a second tag; ``phantom``: expected phantom tags per object, placed far from every
    object; ``slip``: probability the announced count differs from the tag count by +-1.
    """

    name = "noisy-pointer"
    tasks = ("image",)
    """Its errors are tagging errors, measured by the image task's point-level audit (not the
    oracle's every task: a video has no points, so each episode there would end in an error)."""
    needs_points = True
    """Its injected errors are point errors: a count-only dataset is refused before any episode."""

    def __init__(
        self,
        sigma: float = 3.0,
        omission: float = 0.1,
        duplicate: float = 0.05,
        phantom: float = 0.05,
        slip: float = 0.1,
        seed: int = 0,
    ) -> None:
        super().__init__()
        sigma, omission, duplicate, phantom, slip = (
            _number(k, v) for k, v in (("sigma", sigma), ("omission", omission), ("duplicate", duplicate),
                                       ("phantom", phantom), ("slip", slip))
        )
        for k, v in {
            "omission": omission,
            "duplicate": duplicate,
            "phantom": phantom,
            "slip": slip,
        }.items():
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{k} must be in [0, 1], got {v}")
        if sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        self.sigma, self.omission, self.duplicate = sigma, omission, duplicate
        self.phantom, self.slip = phantom, slip
        self.rng = np.random.default_rng(seed)

    def seed(self, seed: int) -> None:
        """Per-episode seeding (the runner calls this so results do not depend on run order)."""
        self.rng = np.random.default_rng(seed)

    def _plan(self, obs: dict[str, Any], task: Task) -> tuple[list[tuple[float, float]], int]:
        if self._truth is None:
            raise RuntimeError("noisy-pointer needs ground-truth points; this stimulus has a count only")
        rng = self.rng
        truth = np.asarray(self._truth, dtype=float).reshape(-1, 2)
        w, h = task.image_size
        to_px = np.array([w / 1000.0, h / 1000.0])
        tau_norm = tau_for(truth * to_px) / max(w, h) * 1000.0 if len(truth) else 15.0
        sd = self.sigma
        pts: list[np.ndarray] = []
        for p in truth:
            if rng.random() < self.omission:
                continue
            pts.append(p + rng.normal(0, sd, 2))
            if rng.random() < self.duplicate:
                pts.append(p + rng.normal(0, sd, 2) + rng.choice([-1, 1], 2) * 0.2 * tau_norm)
        n_ph = rng.binomial(len(truth), self.phantom) if len(truth) else 0
        for _ in range(n_ph):
            for _try in range(200):
                c = rng.uniform(0, 1000, 2)
                if not len(truth) or np.min(np.hypot(*(truth - c).T)) > 2.5 * tau_norm:
                    pts.insert(int(rng.integers(len(pts) + 1)), c)
                    break
        pts_l = [(float(np.clip(x, 0, 1000)), float(np.clip(y, 0, 1000))) for x, y in pts]
        count = len(pts_l)
        if rng.random() < self.slip:
            count = max(0, count + int(rng.choice([-1, 1])))
        return pts_l, count


class BlobCounter(_TagThenAnswer):
    """A classical detector (connected components of dark or coloured pixels) that tags what it
    finds and answers their number; a model-free policy that only looks at pixels."""

    name = "blob-counter"

    def _plan(self, obs: dict[str, Any], task: Task) -> tuple[list[tuple[float, float]], int]:
        img = obs["image"]
        obj = task.obj.lower()
        target = "red" if "red" in obj else ("any" if obj in ("shapes", "objects") else "dark")
        h, w = img.shape[:2]
        pts = [(x * 1000.0 / w, y * 1000.0 / h) for x, y in detect_blobs(img, target=target)]
        return pts, len(pts)
