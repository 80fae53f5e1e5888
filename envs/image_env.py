"""The image tool environment of *Give the Model a Finger* (Section 3, Appendices B and C)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from PIL import Image

from countgym.envs import native_tools as nt
from countgym.envs import templates as tpl
from countgym.envs.actions import TOOLS, Answer, Crop, Erase, Grid, Reply, Tag, action_to_dict
from countgym.envs.common import (
    build_record,
    new_episode,
    pick_stimulus_id,
    resolve_dataset_arg,
    set_reply,
    stimulus_pool,
)
from countgym.envs.originals import Original, load_original, mark_drawn_over
from countgym.envs.parser import ParseResult, parse_action
from countgym.envs.render import crop_view, erase_radius, render_working_image
from countgym.envs.rewards import RewardFn, resolve_reward
from countgym.envs.spaces import ImageSpace, MessageSpace
from countgym.envs.state import EpisodeState
from countgym.limits import MAX_BUDGET
from countgym.logs import EpisodeRecord, StepRecord
from countgym.matching import match_tags
from countgym.stimulus import Dataset, Stimulus

MAX_LONG_SIDE = 1024
MAX_POINTS_PER_CALL = 100
MAX_TAGS_PER_TRAJECTORY = 300
MAX_REISSUES = 3
"""Re-issue requests per run of invalid replies (Give the Model a Finger, App. C: "at most three
times"); the next invalid reply in a row ends the episode."""
TAG1_BUDGET = 80

Prompt = Literal["tools", "direct", "cot", "list", "tiles"]
Protocol = Literal["json", "native"]


class CountImageEnv(gym.Env):
    """Count objects in an image with a JSON tool set (tag, crop, erase, grid, answer).

    ## Description
    The multi-turn harness of *Give the Model a Finger*. A policy (usually a VLM) sees an image
    and a message, and replies with text whose last line is one JSON action. Tags are drawn as
    numbered red marks on a working image that is re-rendered from the episode state after every
    action, so any view can be reproduced from the log (``countgym replay``).

    ## Action Space
    ``MessageSpace``: the model's whole reply as text (the last JSON action wins), a JSON string,
    a typed action (``countgym.envs.actions.Tag`` ...), or a ``Reply`` carrying text plus the
    call's usage. Coordinates are in the normalised [0, 1000] frame of the original image.

    | tool   | JSON                                          | effect                             |
    |--------|-----------------------------------------------|------------------------------------|
    | tag    | {"tool":"tag","points":[[x,y],...]}           | numbered tags; "mode":"replace"    |
    | crop   | {"tool":"crop","box":[x1,y1,x2,y2]}           | enlarged view of a region          |
    | erase  | {"tool":"erase","points":[[x,y],...]} or box  | grey discs / rectangle under tags  |
    | grid   | {"tool":"grid","on":true}                     | 0-1000 coordinate grid             |
    | answer | {"tool":"answer","count":N}                   | final answer (always enabled)      |

    ## Observation Space
    ``Dict(image=ImageSpace, text=MessageSpace, system=MessageSpace)``: the working image (or a
    crop view) as uint8 H x W x 3, the protocol message, and the system prompt (first
    observation of the tool loop only; empty otherwise). Before anything is drawn, the image of
    a stimulus read from a file is a ``StoredView`` (``countgym.envs.stored_view``): the same
    pixels, decoded only when read (``np.asarray``, indexing, any array attribute), so that a
    backend sends a source file that already is the model's PNG without decoding it. Images
    vary in size, so Gymnasium's flattening (``FlattenObservation``) refuses the space with a
    message saying so.

    ## Rewards
    ``reward="exact"`` (default): 1 for a correct final answer, else 0; ``"neg_abs_error"``;
    ``"audit"`` (on-target minus duplicate and phantom tags); or a callable
    ``(state, stimulus) -> float``. ``tool_cost`` is subtracted per tool call. Rewards are for
    RL; evaluation metrics come from ``countgym.analysis``.

    ## Starting State
    ``reset(seed=..., options={"stimulus_id": ...})`` picks the named stimulus, or one drawn with
    the environment's RNG. Images are resized to at most 1024 px on the long side.

    ## Episode End
    - Termination: an ``answer`` action.
    - Truncation: the budget is spent and the one further request was not answered with a number
      (the announced count is the number of tags, ``end="budget"``); a fourth invalid reply in a
      row, after three re-issue requests (no count, ``end="invalid"``); a failed model call
      (``Reply.error``, ``end="error"``); a wrapper's limit (``TimeLimit``: no count,
      ``end="truncated"``, recorded by ``TruncationRecord``, which ``gymnasium.make`` adds).

    ## Information
    Every step: ``tags_added`` (pixels), ``tags_dropped``, ``calls_left``, ``view`` ("image" or
    "crop"), and ``action`` (the parsed action, JSON form) or ``parse_error`` (why the reply was
    invalid). Ground truth appears only once the episode has ended: ``truth`` (``{"n": ...}``),
    ``stimulus_id``, ``end``, ``answer`` (absent when none was announced) and ``episode_record``
    (the full ``EpisodeRecord``). ``info["episode"]`` is left to Gymnasium's
    ``RecordEpisodeStatistics``. Keys are left out rather than set to None, so vector envs can batch
    the info of sub-envs in different states.

    ## Arguments
    ``dataset`` (battery name, folder, or ``Dataset``), ``stimulus_ids`` (restrict the pool),
    ``tools`` (enabled tools), ``budget`` (T, default 6; 80 with ``one_point_per_call``),
    ``verify`` (verification prompt), ``numbered`` (numbers vs plain marks),
    ``one_point_per_call`` (tag-1), ``order`` (None, "reading", "reverse"), ``perturb`` (None,
    "remove", "add"), ``prompt`` ("tools", "direct", "cot", "list", "tiles"), ``protocol``
    ("json": the paper's JSON action line, the default; "native": the same tools as OpenAI-style
    function definitions, ``tool_schema()``, answered by a ``Reply`` with ``tool_calls``; the
    first call is executed), ``reward``, ``tool_cost``, ``arm`` and ``model`` (written into the
    episode record).

    ## Version History
    - v0: initial release. The first observation's ``image`` became a lazy ``StoredView``
      (same pixels once decoded) for stimuli read from files.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 1}

    # --- task hooks (read by ``countgym.tasks``; see the module docstring there) ---
    task: ClassVar[str] = "image"
    MEDIA: ClassVar[str] = "image"
    """What each stimulus must have on disk: an ``image`` or sampled ``frames``."""
    CELL_OPTIONS: ClassVar[frozenset[str]] = frozenset(
        {"tools", "budget", "extra_tools", "verify", "numbered", "order", "perturb",
         "one_point_per_call", "prompt", "reward", "tool_cost", "thinking", "protocol"}
    )

    @classmethod
    def claims_dataset(cls, dataset: str) -> bool:
        """Every image dataset is this task's (it is the registry's fallback)."""
        return True

    @classmethod
    def load_dataset(cls, dataset: str) -> Dataset:
        """A battery name (``dotarrays:common``), a photo set or a dataset folder."""
        from countgym.scenes import resolve_dataset

        return resolve_dataset(dataset)

    @classmethod
    def cell_options(
        cls, *, tools: Sequence[str] | None = None, budget: int | None = None, **options: Any
    ) -> dict[str, Any]:
        """Environment options for a policy that is not a baseline arm: the tag tool (plus
        ``extra_tools``) unless ``tools`` is given, the budget, and the ablations."""
        from countgym.errors import UserError

        options = {k: v for k, v in options.items() if v is not None}
        options.pop("thinking", None)  # a backend option of model arms
        extra = options.pop("extra_tools", ())
        unknown = set(options) - cls.CELL_OPTIONS
        if unknown:
            raise UserError(f"unknown option(s) {sorted(unknown)} for {cls.__name__}: use {sorted(cls.CELL_OPTIONS)}")
        opts: dict[str, Any] = {"tools": list(tools) if tools is not None else ["tag", *extra], **options}
        if budget is not None:
            opts["budget"] = budget
        return opts

    def __init__(
        self,
        dataset: str | Dataset = "dotarrays",
        *,
        stimulus_ids: Sequence[str] | None = None,
        tools: Sequence[str] = ("tag",),
        budget: int | None = None,
        verify: bool = True,
        numbered: bool = True,
        one_point_per_call: bool = False,
        order: Literal["reading", "reverse"] | None = None,
        perturb: Literal["remove", "add"] | None = None,
        prompt: Prompt = "tools",
        protocol: Protocol = "json",
        reward: str | RewardFn = "exact",
        tool_cost: float = 0.0,
        arm: str = "custom",
        model: str = "unknown",
        render_mode: str | None = None,
    ) -> None:
        self.dataset, self.dataset_name = resolve_dataset_arg(dataset)
        self._pool = stimulus_pool(self.dataset, stimulus_ids)
        bad = [t for t in tools if t not in TOOLS]
        if bad:
            raise ValueError(f"unknown tools {bad}; choose from {TOOLS}")
        self.tools = tuple(t for t in TOOLS if t in tools or t == "answer")
        self.budget = int(budget if budget is not None else (TAG1_BUDGET if one_point_per_call else 6))
        if not 0 <= self.budget <= MAX_BUDGET:
            raise ValueError(f"budget must be an integer from 0 to {MAX_BUDGET}, got {budget}")
        if order not in (None, "reading", "reverse"):
            raise ValueError(f"order must be None, 'reading' or 'reverse', got {order!r}")
        if perturb not in (None, "remove", "add"):
            raise ValueError(f"perturb must be None, 'remove' or 'add', got {perturb!r}")
        if prompt not in ("tools", "direct", "cot", "list", "tiles"):
            raise ValueError(f"unknown prompt {prompt!r}")
        if protocol not in ("json", "native"):
            raise ValueError(f"protocol must be 'json' or 'native', got {protocol!r}")
        if protocol == "native" and prompt != "tools":
            raise ValueError(f"protocol 'native' is for the tool loop (prompt 'tools'), not {prompt!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.protocol: Protocol = protocol
        self.verify, self.numbered = bool(verify), bool(numbered)
        self.one_point_per_call, self.order, self.perturb = bool(one_point_per_call), order, perturb
        self.prompt: Prompt = prompt
        self.reward_fn = resolve_reward(reward)
        self.reward_name = reward if isinstance(reward, str) else getattr(reward, "__name__", "custom")
        self.tool_cost = float(tool_cost)
        self.arm, self.model = arm, model
        self.render_mode = render_mode

        self.observation_space = gym.spaces.Dict(
            {"image": ImageSpace(MAX_LONG_SIDE), "text": MessageSpace(), "system": MessageSpace()}
        )
        self.action_space = MessageSpace(accepts=(Reply, Tag, Crop, Erase, Grid, Answer))

        self.state: EpisodeState | None = None
        self.stimulus: Stimulus | None = None
        self._truth_points: np.ndarray | None = None
        self._steps: list[StepRecord] = []
        self._obs: dict[str, Any] | None = None
        self._original: Original | None = None
        self._episode: dict[str, Any] = {}

    # ------------------------------------------------------------------ gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        self.stimulus = self.dataset[pick_stimulus_id(self.np_random, self._pool, options)]
        loaded = load_original(self.dataset, self.stimulus, MAX_LONG_SIDE)
        original, stored_size = loaded.image, loaded.stored_size
        self._original = loaded
        scale = original.size[0] / stored_size[0], original.size[1] / stored_size[1]
        pts = self.stimulus.points
        self._truth_points = (
            np.asarray(pts, dtype=float).reshape(-1, 2) * np.asarray(scale) if pts is not None else None
        )
        self.state = EpisodeState(original=original, calls_left=self.budget)
        self._steps = []
        self._episode = new_episode(seed, options, stored_size=stored_size)
        obs = self._observation(self._first_text(), system=self._system_text())
        info = {"calls_left": self.state.calls_left, "tools": self.tools, "view": "image"}
        return obs, info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self.state is None or self.state.ended:
            raise RuntimeError("the episode has ended (or never started); call reset()")
        st = self.state
        rec = StepRecord(index=len(self._steps))
        # A reply is stored and parsed within REPLY_LIMIT (its tail); the rest is its length and hash.
        to_parse: Any = action
        if isinstance(action, Reply):
            rec.usage, rec.cost, rec.latency_s = action.usage, action.cost, action.latency_s
            text = set_reply(rec, action.text) if isinstance(action.text, str) else None
            if action.action is None:
                to_parse = text
            if action.tool_calls and action.action is None:
                rec.tool_calls = [dict(c) for c in action.tool_calls]
                if self.protocol == "native":
                    to_parse = nt.call_to_action(action.tool_calls[0])
        elif isinstance(action, str):
            to_parse = set_reply(rec, action)

        reward = 0.0
        terminated = truncated = False
        view = "image"
        crop_box = None

        if isinstance(action, Reply) and action.error is not None:
            st.end, st.error = "error", action.error
            rec.parse_error = None
            message = ""
            truncated = True
            parsed = ParseResult(None, None)
        else:
            if isinstance(to_parse, str) and rec.tool_calls and self.protocol == "native":
                parsed = ParseResult(None, f"invalid tool call: {to_parse}")
            else:
                parsed = parse_action(to_parse, tools=self.tools)
            rec.action = action_to_dict(parsed.action) if parsed.action is not None else None
            rec.parse_error = parsed.error

        if st.end == "error":
            pass
        elif st.awaiting_final:
            # Budget exhausted: one more request for a number; anything else ends with the tag count.
            if isinstance(parsed.action, Answer):
                st.answer, st.end = parsed.action.count, "answer"
                terminated = True
            else:
                st.answer, st.end = len(st.tags), "budget"
                truncated = True
            message = ""
        elif parsed.action is None:
            st.invalid_in_a_row += 1
            invalid = nt.NATIVE_INVALID if self.protocol == "native" else tpl.INVALID
            message = invalid.format(left=st.calls_left)
            if self.prompt in ("direct", "cot", "list") or st.invalid_in_a_row > MAX_REISSUES:
                # Nothing more goes to the model: no re-issue request for this reply.
                st.end, st.answer = "invalid", None
                truncated = True
                message = ""
        else:
            st.invalid_in_a_row = 0
            act = parsed.action
            if isinstance(act, Answer):
                st.answer, st.end = act.count, "answer"
                terminated = True
                message = ""
            elif st.calls_left <= 0:
                # A tool call with no budget left (only possible with budget=0).
                st.answer, st.end = len(st.tags), "budget"
                truncated = True
                message = ""
            else:
                st.calls_left -= 1
                st.tool_calls += 1
                reward -= self.tool_cost
                if isinstance(act, Tag):
                    message = self._apply_tag(act, parsed, rec)
                elif isinstance(act, Crop):
                    crop_box = self._norm_box_to_px(act.box)
                    rec.crop_box = crop_box
                    view = "crop"
                    message = tpl.CROP_DONE.format(left=st.calls_left)
                elif isinstance(act, Erase):
                    message = self._apply_erase(act, rec)
                else:
                    assert isinstance(act, Grid)
                    st.grid = act.on
                    rec.grid = act.on
                    tmpl = tpl.GRID_DONE if act.on else tpl.HARNESS_GRID_OFF
                    message = tmpl.format(left=st.calls_left)
                if st.calls_left == 0:
                    st.awaiting_final = True
                    exhausted = (
                        nt.NATIVE_BUDGET_EXHAUSTED if self.protocol == "native" else tpl.BUDGET_EXHAUSTED.format()
                    )
                    message = f"{message} {exhausted}"

        rec.message = message
        rec.calls_left = st.calls_left
        self._steps.append(rec)
        ended = terminated or truncated
        if ended:
            st.ended = True
            reward += float(self.reward_fn(st, self._reward_stimulus()))
        obs = self._observation(message, crop_box=crop_box)
        # Keys whose value would be None are left out: Gymnasium's vector envs type each batched
        # info key by its first value, so an int in one sub-env next to None in another crashes.
        info: dict[str, Any] = {
            "tags_added": list(rec.tags_added),
            "tags_dropped": rec.tags_dropped,
            "calls_left": st.calls_left,
            "view": view,
        }
        if rec.action is not None:
            info["action"] = rec.action
        if rec.parse_error is not None:
            info["parse_error"] = rec.parse_error
        if ended:
            info.update(self._end_info())
        return obs, reward, terminated, truncated, info

    def truncate(self) -> tuple[float, dict[str, Any]]:
        """End an episode that a wrapper cut short (``TimeLimit``, say) as ``end="truncated"``
        with no count: returns the end reward and the info an ended episode carries
        (``episode_record`` included), or ``(0.0, {})`` when the episode had already ended.
        ``countgym.envs.wrappers.TruncationRecord`` calls it; ``gymnasium.make`` adds that wrapper."""
        st = self.state
        if st is None or st.ended:
            return 0.0, {}
        st.end, st.answer, st.ended = "truncated", None, True
        return float(self.reward_fn(st, self._reward_stimulus())), self._end_info()

    def _end_info(self) -> dict[str, Any]:
        st, stim = self.state, self.stimulus
        assert st is not None and stim is not None
        info: dict[str, Any] = {
            "truth": {"n": stim.n},
            "stimulus_id": stim.id,
            "end": st.end,
            # The record as an object (not a dict), so vector envs keep it whole.
            "episode_record": self.episode_record(),
        }
        if st.answer is not None:
            info["answer"] = st.answer
        return info

    def render(self) -> np.ndarray | None:
        """The current working image (``render_mode="rgb_array"``)."""
        if self.render_mode != "rgb_array" or self.state is None:
            return None
        return np.asarray(self._working_image())

    def close(self) -> None:
        self.state = None

    # ------------------------------------------------------------------ records
    def episode_record(self) -> EpisodeRecord:
        """The episode so far as an ``EpisodeRecord`` (truth included once it has ended)."""
        st = self.state
        if st is None or self.stimulus is None:
            raise RuntimeError("no episode; call reset()")
        return build_record(
            self,
            steps=self._steps,
            answer=st.answer,
            end=st.end,
            error=st.error,
            ended=st.ended,
            image_size=st.original.size,
            stimulus_size=self._episode["stored_size"],
            template_hash=nt.NATIVE_TEMPLATE_HASH if self.protocol == "native" else tpl.TEMPLATE_HASH,
            tags=st.tags,
        )

    def options(self) -> dict[str, Any]:
        """The environment options as logged (enough to rebuild an identical environment).

        ``protocol`` appears only when it is "native", so JSON-protocol logs stay as they were."""
        native = {"protocol": "native"} if self.protocol == "native" else {}
        return {
            "tools": list(self.tools),
            "budget": self.budget,
            "verify": self.verify,
            "numbered": self.numbered,
            "one_point_per_call": self.one_point_per_call,
            "order": self.order,
            "perturb": self.perturb,
            "prompt": self.prompt,
            "reward": self.reward_name,
            "tool_cost": self.tool_cost,
            **native,
        }

    def tool_schema(self) -> list[dict[str, Any]]:
        """The enabled tools as OpenAI-style function definitions (the native protocol's
        ``tools=[...]``) for the current episode's object names."""
        s = self.stimulus
        if s is None:
            raise RuntimeError("no episode; call reset()")
        return nt.tool_schema(self.tools, s.obj, s.obj_sing)

    def prompt_text(self, stimulus: Stimulus) -> dict[str, str]:
        """The text of the first observation for ``stimulus`` under this environment's options:
        ``system`` (the tool-loop system prompt; empty for the one-call prompts), ``user`` (the
        first user message) and, under the native protocol, ``tools`` (the tool schema as JSON)."""
        out = {"system": self._system_text(stimulus), "user": self._first_text(stimulus)}
        if self.protocol == "native" and self.prompt == "tools":
            out["tools"] = json.dumps(nt.tool_schema(self.tools, stimulus.obj, stimulus.obj_sing), indent=1)
        return out

    # ------------------------------------------------------------------ helpers
    def _system_text(self, stimulus: Stimulus | None = None) -> str:
        if self.prompt != "tools":
            return ""
        s = stimulus or self.stimulus
        assert s is not None
        return _system_prompt(self.protocol == "native", s.obj, s.obj_sing, self.tools, self.budget)

    def _first_text(self, stimulus: Stimulus | None = None) -> str:
        s = stimulus or self.stimulus
        assert s is not None
        if self.prompt == "direct":
            return tpl.DIRECT.format(obj=s.obj)
        if self.prompt == "cot":
            return tpl.COT.format(obj=s.obj)
        if self.prompt == "list":
            return tpl.LIST.format(obj=s.obj, obj_sing=s.obj_sing)
        return tpl.first_user_message(
            s.obj, s.obj_sing, order=self.order, one_point_per_call=self.one_point_per_call
        )

    def _norm_to_px(self, p: tuple[float, float]) -> tuple[float, float]:
        w, h = self.state.original.size  # type: ignore[union-attr]
        return (p[0] * w / 1000.0, p[1] * h / 1000.0)

    def _norm_box_to_px(self, b: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        x1, y1 = self._norm_to_px((b[0], b[1]))
        x2, y2 = self._norm_to_px((b[2], b[3]))
        return (x1, y1, x2, y2)

    def _apply_tag(self, act: Tag, parsed: ParseResult, rec: StepRecord) -> str:
        st = self.state
        assert st is not None
        notices: list[str] = []
        pts = list(act.points)
        dropped = parsed.dropped_range + parsed.dropped_invalid
        if parsed.dropped_range:
            notices.append(tpl.HARNESS_DROPPED_RANGE.format(k=parsed.dropped_range))
        if self.one_point_per_call and len(pts) > 1:
            notices.append(tpl.HARNESS_DROPPED_ONE_POINT.format(k=len(pts) - 1))
            dropped += len(pts) - 1
            pts = pts[:1]
        if len(pts) > MAX_POINTS_PER_CALL:
            k = len(pts) - MAX_POINTS_PER_CALL
            notices.append(tpl.HARNESS_DROPPED_CALL_CAP.format(cap=MAX_POINTS_PER_CALL, k=k))
            dropped += k
            pts = pts[:MAX_POINTS_PER_CALL]
        if act.mode == "replace":
            st.tags = []
            rec.tags_cleared = True
        room = MAX_TAGS_PER_TRAJECTORY - len(st.tags)
        if len(pts) > room:
            k = len(pts) - room
            notices.append(tpl.HARNESS_DROPPED_TRAJ_CAP.format(cap=MAX_TAGS_PER_TRAJECTORY, k=k))
            dropped += k
            pts = pts[:room]
        a = len(st.tags) + 1
        new = [self._norm_to_px(p) for p in pts]
        st.tags.extend(new)
        rec.tags_added = new
        rec.tags_dropped = dropped
        first_tag_call = not st.tag_calls
        st.tag_calls += 1
        if first_tag_call and self.perturb and new:
            rec.perturbation = self._perturb()
        b = len(st.tags)
        if not new and not rec.perturbation:
            main = tpl.HARNESS_NO_TAGS.format(left=st.calls_left)
        else:
            s = self.stimulus
            assert s is not None
            a = min(a, b) if rec.perturbation else a
            tmpl = tpl.VERIFY if self.verify else tpl.NO_VERIFY
            main = tmpl.format(a=a, b=b, obj=s.obj, obj_sing=s.obj_sing, left=st.calls_left)
        return " ".join([*notices, main])

    def _perturb(self) -> dict[str, Any]:
        """The tag-perturbation probe: silently remove one on-target tag or add one on an
        untagged object (the only place the harness uses ground truth during an episode)."""
        st = self.state
        assert st is not None
        if self._truth_points is None or len(self._truth_points) == 0:
            return {"kind": self.perturb, "skipped": "no point ground truth"}
        m = match_tags(st.tags, self._truth_points)
        if self.perturb == "remove":
            on = [i for i, lab in enumerate(m.tag_label) if lab == "on_target"]
            if not on:
                return {"kind": "remove", "skipped": "no on-target tag"}
            i = on[int(self.np_random.integers(len(on)))]
            del st.tags[i]
            return {"kind": "remove", "index": i}
        if not m.omitted:
            return {"kind": "add", "skipped": "no untagged object"}
        j = m.omitted[int(self.np_random.integers(len(m.omitted)))]
        xy = (float(self._truth_points[j, 0]), float(self._truth_points[j, 1]))
        st.tags.append(xy)
        return {"kind": "add", "xy": list(xy)}

    def _apply_erase(self, act: Erase, rec: StepRecord) -> str:
        st = self.state
        assert st is not None
        s = min(st.original.size)
        regions: list[dict[str, Any]] = []
        if act.box is not None:
            regions.append({"kind": "box", "xyxy": list(self._norm_box_to_px(act.box))})
        for p in act.points or []:
            regions.append({"kind": "disc", "xy": list(self._norm_to_px(p)), "r": erase_radius(s)})
        st.erased.extend(regions)
        rec.erased_added = regions
        return tpl.ERASE_DONE.format(left=st.calls_left)

    def _working_image(self) -> Image.Image:
        st = self.state
        assert st is not None
        return render_working_image(st.original, st.tags, st.erased, st.grid, numbered=self.numbered)

    def _observation(self, text: str, *, system: str = "", crop_box: Any = None) -> dict[str, Any]:
        st = self.state
        if crop_box is None and st is not None and self._original is not None and not (st.tags or st.erased or st.grid):
            # Nothing drawn yet: a copy of the shared unmarked view (backends encode it once).
            return {"image": self._original.first_view(), "text": text, "system": system}
        img = self._working_image()
        if crop_box is not None:
            return {"image": np.asarray(crop_view(img, crop_box)), "text": text, "system": system}
        image = np.asarray(img)
        if self._original is not None:
            # Marks over the shared unmarked view: encoders redo only the rows that changed.
            mark_drawn_over(image, self._original)
        return {"image": image, "text": text, "system": system}

    def _reward_stimulus(self) -> Stimulus:
        """The stimulus with ground-truth points in the working-image frame (for rewards)."""
        s = self.stimulus
        assert s is not None
        if self._truth_points is None:
            return s
        return s.model_copy(update={"points": [tuple(p) for p in self._truth_points.tolist()]})


@functools.lru_cache(maxsize=1024)
def _system_prompt(native: bool, obj: str, obj_sing: str, tools: tuple[str, ...], budget: int) -> str:
    """The tool-loop system prompt (a pure function of its arguments, formatted once: an
    environment is made per episode, and the template fills in about a dozen fields)."""
    if native:
        return nt.system_prompt(obj, obj_sing, tools, budget)
    return tpl.system_prompt(obj, obj_sing, tools, budget)


def make_reward(fn: Callable[[EpisodeState, Stimulus], float]) -> RewardFn:
    """Mark a callable as a reward (identity; for readability in user code)."""
    return fn
