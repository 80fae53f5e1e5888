"""The single-step video counting environment of *CountVideoBench* (Section 5, Appendix E)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from countgym.envs import shm
from countgym.envs.actions import Answer, Reply
from countgym.envs.common import (
    build_record,
    fit_long_side,
    manifest_head,
    new_episode,
    pick_stimulus_id,
    resolve_dataset_arg,
    set_reply,
    single_step_cell_options,
    stimulus_pool,
)
from countgym.envs.extract import Target, extract_count, parse_count
from countgym.envs.frames import FrameStack, as_sent, decode_frame, read_frame_file
from countgym.envs.spaces import MessageSpace, refuse_flattening
from countgym.envs.video_templates import PROMPTS, VIDEO_TEMPLATE_HASH
from countgym.logs import EpisodeRecord, StepRecord
from countgym.stimulus import Dataset, Stimulus

MAX_FRAMES = 64
MAX_SIDE = 4096
Prompt = Literal["P1", "P2", "P3"]


class VideoSpace(spaces.Space[np.ndarray]):
    """uint8 clips T x H x W x 3 with 1 <= T <= ``max_frames`` and 1 <= H, W <= ``max_side``."""

    def __init__(
        self,
        max_frames: int = MAX_FRAMES,
        max_side: int = MAX_SIDE,
        seed: int | np.random.Generator | None = None,
    ):
        self.max_frames, self.max_side = int(max_frames), int(max_side)
        super().__init__(shape=None, dtype=np.uint8, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        t = int(self.np_random.integers(1, min(self.max_frames, 4) + 1))
        h, w = self.np_random.integers(1, min(self.max_side, 32) + 1, size=2)
        return self.np_random.integers(0, 256, size=(t, int(h), int(w), 3), dtype=np.uint8)

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, np.ndarray | FrameStack)
            and x.dtype == np.uint8
            and x.ndim == 4
            and x.shape[3] == 3
            and 1 <= x.shape[0] <= self.max_frames
            and 1 <= x.shape[1] <= self.max_side
            and 1 <= x.shape[2] <= self.max_side
        )

    def __repr__(self) -> str:
        return f"VideoSpace(max_frames={self.max_frames}, max_side={self.max_side})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VideoSpace) and (other.max_frames, other.max_side) == (
            self.max_frames,
            self.max_side,
        )


SHM_CLIP_BYTES = 10 * 1920 * 1080 * 3
"""Shared-memory slot of one sub-env: the protocol's 10 sampled frames at 1920 x 1080 (the
space's own bound, 64 frames of 4096 px, would reserve gigabytes per sub-env)."""

refuse_flattening(VideoSpace, "its clips vary in length and frame size")
shm.register_bytes_space(
    VideoSpace,
    lambda sp: min(sp.max_frames * sp.max_side * sp.max_side * 3, SHM_CLIP_BYTES),
    shm.encode_array,
    shm.decode_array,
)


class CountVideoEnv(gym.Env):
    """Count the objects of one class in a video from uniformly sampled frames.

    ## Description
    The zero-shot protocol of *CountVideoBench*: a model sees the 10 uniformly sampled frames of
    a clip and one question, replies in free text, and the count is extracted strictly from the
    reply (``countgym.envs.extract``): the count bound to the queried object or to a total/final
    phrase, numbers that are not counts of it set aside (frames, seconds, indices, other
    objects). Replies the rules leave open can go to the audit's model parser (Section 5.1).
    The reply is parsed and stored within ``REPLY_LIMIT`` characters (its tail).
    One observation, one action, then the episode ends.

    ## Action Space
    ``MessageSpace``: the reply text, a ``Reply`` (text plus the call's usage, cost, latency, or
    an ``error`` for a failed call) or a typed ``Answer(count=...)``.

    ## Observation Space
    ``Dict(frames=VideoSpace, text=MessageSpace)``

    | key    | content                                                       |
    |--------|---------------------------------------------------------------|
    | frames | the sampled frames in time order: a ``FrameStack`` (``countgym.envs.frames``), uint8 T x H x W x 3 once decoded (``np.asarray``); each frame held as the stored file sent for it, decoded only when read |
    | text   | the question: P1 "How many [color] [shape]s are in this video?" (default), P2, P3 |

    ## Rewards
    ``reward="exact"`` (default): 1 when the extracted count equals the truth, else 0;
    ``"neg_abs_error"``: minus the absolute error (no answer: minus the true count); or a
    callable ``(answer: int | None, stimulus) -> float``.

    ## Starting State
    ``reset(seed=..., options={"stimulus_id": ...})`` picks the named video, or one drawn with
    the environment's RNG. Frames are resized so the long side is at most ``max_side`` when set
    (those frames are held as pixels). Reset reads the frame files and decodes nothing.

    ## Episode End
    - Termination: the first action, whatever it is. ``end="answer"`` when a count was
      extracted, ``end="invalid"`` when not (``parse_error`` says why), ``end="error"`` for a
      ``Reply`` carrying an error (truncation).

    ## Information
    ``reset``: ``prompt`` (the question id), ``n_frames``. ``step``: ``answer``, ``extraction``
    (why), and, once ended (always, after the one step), ``truth`` (``{"n": ...}``),
    ``stimulus_id`` and ``end``. The ``EpisodeRecord`` comes from ``episode_record()`` (not in
    ``info``: its timestamps would make same-seed steps differ).

    ## Arguments
    ``dataset`` (folder, battery name or ``Dataset``), ``stimulus_ids``, ``prompt`` ("P1", "P2",
    "P3"), ``max_side`` (None keeps the stored size), ``reward``, ``arm``, ``model``.

    ## Version History
    - v0: initial release. ``frames`` became a lazy ``FrameStack`` (same pixels once decoded),
      and the terminal step returns the same immutable stack instead of a copy.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 2}

    # --- task hooks (read by ``countgym.tasks``; see the module docstring there) ---
    task: ClassVar[str] = "video"
    MEDIA: ClassVar[str] = "frames"
    """What each stimulus must have on disk: an ``image`` or sampled ``frames``."""
    CELL_OPTIONS: ClassVar[frozenset[str]] = frozenset({"prompt", "max_side", "reward"})

    @classmethod
    def claims_dataset(cls, dataset: str) -> bool:
        """The ``countvideo`` battery (and its ``countvideo:kK`` subsets) and folders whose
        manifest lists sampled frames."""
        name = str(dataset)
        if name == "countvideo" or name.startswith("countvideo:"):
            return True
        head = manifest_head(name)
        return bool((head or {}).get("frames"))

    @classmethod
    def load_dataset(cls, dataset: str) -> Dataset:
        """A battery name or dataset folder, or the root of the released benchmark."""
        from pathlib import Path

        root = Path(dataset).expanduser()
        if root.is_dir() and not (root / "manifest.jsonl").is_file():
            from countgym.scenes.video import load_released_countvideo

            return load_released_countvideo(root)
        from countgym.scenes import resolve_dataset

        return resolve_dataset(dataset)

    @classmethod
    def cell_options(
        cls, *, tools: Sequence[str] | None = None, budget: int | None = None, **options: Any
    ) -> dict[str, Any]:
        """Environment options for a policy that is not a video arm (``prompt``, ``max_side``)."""
        return single_step_cell_options("CountVideo", cls.CELL_OPTIONS, tools, budget, options)

    def __init__(
        self,
        dataset: str | Dataset = "countvideo:k1",
        *,
        stimulus_ids: Sequence[str] | None = None,
        prompt: Prompt = "P1",
        max_side: int | None = None,
        reward: str | Any = "exact",
        arm: str = "direct",
        model: str = "unknown",
        render_mode: str | None = None,
    ) -> None:
        self.dataset, self.dataset_name = resolve_dataset_arg(dataset)
        self._pool = stimulus_pool(self.dataset, stimulus_ids)
        if stimulus_ids is not None or not getattr(self.dataset, "_frames_checked", False):
            for sid in self._pool:
                if not self.dataset[sid].frames:
                    raise ValueError(f"stimulus {sid!r} has no frames: not a video dataset")
            if stimulus_ids is None:  # a whole dataset is checked once (a runner makes an env per episode)
                try:
                    self.dataset._frames_checked = True  # type: ignore[attr-defined]
                except AttributeError:  # a dataset type with slots: checked again next time
                    pass
        if prompt not in PROMPTS:
            raise ValueError(f"prompt must be one of {sorted(PROMPTS)}, got {prompt!r}")
        if max_side is not None and not 16 <= int(max_side) <= MAX_SIDE:
            raise ValueError(f"max_side must be in 16..{MAX_SIDE} or None, got {max_side}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.prompt: Prompt = prompt
        self.max_side = None if max_side is None else int(max_side)
        self.reward_fn, self.reward_name = _resolve_reward(reward)
        self.arm, self.model = arm, model
        self.render_mode = render_mode
        # Agents and the runner read these like the image environment's.
        self.tools: tuple[str, ...] = ("answer",)
        self.budget = 0

        self.observation_space = spaces.Dict({"frames": VideoSpace(), "text": MessageSpace()})
        self.action_space = MessageSpace(accepts=(Reply, Answer))

        self.stimulus: Stimulus | None = None
        self._frames: FrameStack | None = None
        self._question = ""
        self._steps: list[StepRecord] = []
        self._answer: int | None = None
        self._end: str | None = None
        self._error: str | None = None
        self._extracted_by: str | None = None
        self._episode: dict[str, Any] = {}

    # ------------------------------------------------------------------ gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        self.stimulus = self.dataset[pick_stimulus_id(self.np_random, self._pool, options)]
        self._frames = self._load_frames(self.stimulus)
        self._question = self.question(self.stimulus)
        self._steps, self._answer, self._end, self._error = [], None, None, None
        self._extracted_by = None
        self._episode = new_episode(seed, options)
        # The stack is immutable: every caller may hold the same object.
        obs = {"frames": self._frames, "text": self._question}
        return obs, {"prompt": self.prompt, "n_frames": int(self._frames.shape[0])}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self.stimulus is None or self._end is not None:
            raise RuntimeError("the episode has ended (or never started); call reset()")
        rec = StepRecord(index=0)
        terminated = truncated = False
        if isinstance(action, Reply):
            rec.usage, rec.cost, rec.latency_s = action.usage, action.cost, action.latency_s
            if isinstance(action.text, str):
                set_reply(rec, action.text)
        if isinstance(action, Reply) and action.error is not None:
            self._end, self._error = "error", action.error
            truncated = True
            reason = "model call failed"
        else:
            value, reason = self._read(action, rec)
            self._answer = value
            self._end = "answer" if value is not None else "invalid"
            terminated = True
            if value is not None:
                rec.action = {"tool": "answer", "count": value}
            else:
                rec.parse_error = reason
        self._steps.append(rec)
        reward = float(self.reward_fn(self._answer, self.stimulus))
        # The record (with its timestamps) stays out of ``info`` so same-seed steps give equal
        # infos (Gymnasium's determinism check); ``episode_record()`` returns it.
        info = {
            "answer": self._answer,
            "extraction": reason,
            "truth": {"n": self.stimulus.n},
            "stimulus_id": self.stimulus.id,
            "end": self._end,
        }
        # None values are left out: vector envs type each batched key by its first value.
        info = {k: v for k, v in info.items() if v is not None}
        # The same immutable stack (nothing is decoded or copied for a step nothing may read).
        assert self._frames is not None, "reset() first"
        return {"frames": self._frames, "text": ""}, reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        """The sampled frames side by side (``render_mode="rgb_array"``)."""
        if self.render_mode != "rgb_array" or self._frames is None:
            return None
        return np.concatenate(list(np.asarray(self._frames)), axis=1)

    def close(self) -> None:
        self._frames = None

    # ------------------------------------------------------------------ records
    def question(self, stimulus: Stimulus) -> str:
        """The question for a video, from its metadata (shape and colour)."""
        shape = stimulus.meta.get("shape")
        color = stimulus.meta.get("color")
        if shape and color:
            return PROMPTS[self.prompt].format(color=color, shape=shape)
        # Other video datasets: fall back to the plural object name.
        return PROMPTS[self.prompt].replace("{color} {shape}s", stimulus.obj)

    def prompt_text(self, stimulus: Stimulus) -> dict[str, str]:
        """The text of the first observation for ``stimulus``: ``user``, the question of this
        environment's prompt (P1-P3)."""
        return {"system": "", "user": self.question(stimulus)}

    @property
    def image_size(self) -> tuple[int, int]:
        """(width, height) of the frames shown at reset."""
        if self._frames is None:
            raise RuntimeError("no episode; call reset()")
        return int(self._frames.shape[2]), int(self._frames.shape[1])

    def episode_record(self) -> EpisodeRecord:
        """The episode as an ``EpisodeRecord`` (truth included once it has ended)."""
        stim = self.stimulus
        if stim is None or self._frames is None:
            raise RuntimeError("no episode; call reset()")
        return build_record(
            self,
            steps=self._steps,
            answer=self._answer,
            end=self._end,
            error=self._error,
            ended=self._end is not None,
            image_size=self.image_size,
            stimulus_size=self._stored_size(stim),
            template_hash=VIDEO_TEMPLATE_HASH,
            extracted_by=self._extracted_by,
        )

    def options(self) -> dict[str, Any]:
        """The environment options as logged."""
        return {
            "task": "video",
            "prompt": self.prompt,
            "max_side": self.max_side,
            "reward": self.reward_name,
        }

    # ------------------------------------------------------------------ helpers
    def _read(self, action: Any, rec: StepRecord) -> tuple[int | None, str]:
        typed = action if isinstance(action, Answer) else None
        if isinstance(action, Reply) and isinstance(action.action, Answer):
            typed = action.action
        if typed is not None:
            self._extracted_by = "typed"
            if isinstance(action, Answer):
                rec.reply = None
            value, kind = parse_count(typed.count)
            return value, "typed answer" if value is not None else f"typed answer: not a count ({kind})"
        if isinstance(action, Reply):
            text = rec.reply or ""
        elif isinstance(action, str):
            text = set_reply(rec, action)
        else:
            self._extracted_by = "none"
            return None, f"unsupported action type {type(action).__name__}"
        res = extract_count(text, question=self._question, target=self._target(self.stimulus))
        self._extracted_by = "rule" if res.value is not None else "none"
        return res.value, res.reason

    @staticmethod
    def _target(stim: Stimulus | None) -> Target | None:
        """The queried object (shape and colour from the metadata), for the extraction rules."""
        if stim is None:
            return None
        shape, color = stim.meta.get("shape"), stim.meta.get("color")
        if shape:
            return Target(str(shape), str(color) if color else None)
        return Target(stim.obj_sing) if stim.obj_sing else None

    def _load_frames(self, stim: Stimulus) -> FrameStack:
        return stored_frames(self.dataset, stim, self.max_side)

    def _stored_size(self, stim: Stimulus) -> tuple[int, int] | None:
        size = stim.meta.get("render_size")
        return (int(size[0]), int(size[1])) if size else None


def load_frames(dataset: Dataset, stim: Stimulus, max_side: int | None = None) -> np.ndarray:
    """The sampled frames as shown (T x H x W x 3 uint8), long side fitted to ``max_side``.

    The environment and replay both call this, so a replayed observation is the observation.
    """
    from countgym.stimulus import check_video_pixels

    check_video_pixels(dataset, stim)  # the whole video's size, before a frame is decoded
    frames = []
    for rel in stim.frames or []:
        img = dataset.load_image(stim.model_copy(update={"image": rel}))
        if max_side is not None:
            img = fit_long_side(img, max_side)
        frames.append(np.asarray(img, dtype=np.uint8))
    if not frames:
        raise ValueError(f"stimulus {stim.id!r} has no frames: not a video dataset")
    if len({f.shape for f in frames}) != 1:
        raise ValueError(f"stimulus {stim.id!r}: frames differ in size")
    return np.stack(frames)


def stored_frames(dataset: Dataset, stim: Stimulus, max_side: int | None = None) -> FrameStack:
    """The sampled frames as the environment shows them, without decoding a clean stored frame:
    each frame file read once and held as the bytes a model is sent (``countgym.envs.frames``),
    or as its pixels when it must be fitted to ``max_side`` or is not clean. The pixels, once
    decoded, are ``load_frames``'s. A dataset that reads its images its own way is decoded by it."""
    from countgym.envs.originals import _standard_loader

    if not _standard_loader(dataset):
        return FrameStack(list(load_frames(dataset, stim, max_side)))
    from countgym.errors import UserError
    from countgym.stimulus import MAX_VIDEO_PIXELS, check_video_pixels

    frames: list[Any] = []
    total = 0
    for rel in stim.frames or []:
        path = dataset.media_path(stim, rel, "frame")
        try:
            data, identity = read_frame_file(path)
        except FileNotFoundError:
            raise UserError(f"missing frame {path} for stimulus {stim.id!r}") from None
        except OSError as e:
            raise UserError(f"cannot read frame {path}: {e}") from None
        frame = as_sent(data, identity)
        w, h = (frame.shape[1], frame.shape[0]) if frame is not None else _header_size(data, path)
        total += w * h
        if total > MAX_VIDEO_PIXELS:
            check_video_pixels(dataset, stim)  # raises its one-line error, from the headers
        if frame is None or (max_side is not None and max(w, h) > max_side):
            try:
                pixels = decode_frame(data, str(path))
            except (OSError, ValueError) as e:
                raise UserError(f"cannot read frame {path}: {e}") from None
            if max_side is not None and max(w, h) > max_side:
                from PIL import Image

                pixels = np.asarray(fit_long_side(Image.fromarray(pixels), max_side))
                pixels.flags.writeable = False
            frames.append(pixels)
        else:
            frames.append(frame)
    if not frames:
        raise ValueError(f"stimulus {stim.id!r} has no frames: not a video dataset")
    try:
        return FrameStack(frames)
    except ValueError:
        raise ValueError(f"stimulus {stim.id!r}: frames differ in size") from None


def _header_size(data: bytes, path: Any) -> tuple[int, int]:
    """(width, height) of an image file from its header (the pixels are not decoded)."""
    import io
    import warnings

    from PIL import Image

    from countgym.errors import UserError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                return int(im.width), int(im.height)
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise UserError(f"cannot read frame {path}: {e}") from None


def _resolve_reward(reward: str | Any) -> tuple[Any, str]:
    if callable(reward):
        return reward, getattr(reward, "__name__", "custom")
    if reward == "exact":
        return (lambda a, s: float(a is not None and a == s.n)), "exact"
    if reward == "neg_abs_error":
        return (lambda a, s: -float(s.n if a is None else abs(a - s.n))), "neg_abs_error"
    raise ValueError(
        f"unknown reward {reward!r}; choose 'exact', 'neg_abs_error' or pass a callable"
    )


