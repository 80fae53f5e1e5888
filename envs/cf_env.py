"""The CounterCount single-step environment (*CounterCount*, Sections 3-4, Appendix B).

Also home of the two pieces the environment and the analysis share: the question builders
(MCQ with the distractors of Appendix B.1, OE completion, cue, generic names) and the strict
count extraction.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from PIL import Image

from countgym.envs import cf_templates as tpl
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
from countgym.envs.extract import strip_reasoning
from countgym.envs.numbers import NONE_SPAN, Number, count_mentions
from countgym.envs.originals import derived_original, load_original
from countgym.envs.rewards import RewardFn, resolve_reward
from countgym.envs.spaces import ImageSpace, MessageSpace, refuse_flattening
from countgym.envs.state import EpisodeState
from countgym.logs import EpisodeRecord, StepRecord
from countgym.stimulus import Dataset, Stimulus

QuestionFormat = Literal["mcq", "oe"]
MAX_LONG_SIDE = 1024


# =========================================================================== questions
def mcq_counts(ordinary: int, anomalous: int) -> list[int]:
    """The four MCQ counts of Appendix B.1, unshuffled: [anomalous, ordinary, d1, d2].

    Gap > 1: d1 is the midpoint floor((c_o + c_a) / 2). Gap of one (or none): d1 is one below
    the minimum, and when that is not a valid count (zero or below; always so for c_a = 0) it
    falls back to two above the maximum. d2 is one above the maximum (out of range). Duplicates
    are resolved in that order by incrementing the later value until it is unique.
    """
    if ordinary < 0 or anomalous < 0:
        raise ValueError(f"counts must be >= 0, got ordinary={ordinary}, anomalous={anomalous}")
    lo, hi = min(ordinary, anomalous), max(ordinary, anomalous)
    if hi - lo > 1:
        d1 = (ordinary + anomalous) // 2
    else:
        d1 = lo - 1
        if d1 <= 0 or anomalous == 0:
            d1 = hi + 2
    d2 = hi + 1
    out: list[int] = []
    for v in (anomalous, ordinary, d1, d2):
        while v in out:
            v += 1
        out.append(v)
    return out


def option_seed(stimulus_id: str) -> int:
    """The fixed per-image shuffle seed (from the stimulus id, stable across runs and machines)."""
    return int.from_bytes(hashlib.sha256(f"countercount-options|{stimulus_id}".encode()).digest()[:8], "little")


def mcq_options(ordinary: int, anomalous: int, stimulus_id: str) -> list[int]:
    """The four MCQ counts in the order shown, shuffled with the per-image seed."""
    counts = mcq_counts(ordinary, anomalous)
    order = np.random.default_rng(option_seed(stimulus_id)).permutation(len(counts))
    return [counts[i] for i in order]


@dataclass(frozen=True)
class Question:
    """The text a model sees for one stimulus, and what it was built from."""

    text: str
    format: QuestionFormat
    name: str
    """The subject name used (specific or generic)."""
    options: tuple[int, ...] = ()
    """MCQ counts in the order shown (empty for OE)."""

    @property
    def option_words(self) -> tuple[str, ...]:
        """MCQ options in word form, as shown."""
        return tuple(tpl.number_word(v) for v in self.options)


def build_question(
    stimulus: Stimulus, *, format: QuestionFormat = "mcq", cue: bool = False, generic: bool = False
) -> Question:
    """The CounterCount question for a stimulus (Appendix B.3), with the cue (Section 4.1.3)
    and/or the generic subject name (Appendix C.4).

    The MCQ options of both images of a pair are built from (canonical count, CF count), so the
    factual question offers the same four counts as its counterfactual (each shuffled with its
    own image's seed).
    """
    if format not in ("mcq", "oe"):
        raise ValueError(f"format must be 'mcq' or 'oe', got {format!r}")
    meta = stimulus.meta
    name = tpl.generic_name(str(meta.get("category", ""))) if generic else str(meta.get("subject") or stimulus.obj_sing)
    attribute = str(meta.get("attribute") or stimulus.obj_sing)
    fields = {"anomaly": attribute, "anomaly_plural": stimulus.obj, "name": name}
    options: tuple[int, ...] = ()
    if format == "mcq":
        ordinary = int(meta.get("canonical_count", stimulus.n))
        anomalous = int(meta.get("cf_count", stimulus.n))
        options = tuple(mcq_options(ordinary, anomalous, stimulus.id))
        words = tpl.OPTION_SEPARATOR.join(tpl.number_word(v) for v in options)
        text = tpl.fill_question(tpl.MCQ, options=words, **fields)
    else:
        text = tpl.fill_question(tpl.OE, **fields)
    if cue:
        text = f"{tpl.CUE} {text}"
    return Question(text=text, format=format, name=name, options=options)


# =========================================================================== extraction
@dataclass(frozen=True)
class Extraction:
    """What a reply says the count is: ``value`` (None when no single count) and why."""

    value: int | None
    reason: str
    """``answer_line``, ``number``, ``no_number``, ``not_a_count`` or ``ambiguous``."""
    numbers: tuple[int, ...] = ()
    """Every count found (distinct, in order of first appearance): the judge's input."""
    detail: str = ""
    """Why a number was not a count (``not_a_count``)."""

    @property
    def error(self) -> str | None:
        """A one-line parse error for the log (None when a count was extracted)."""
        if self.value is not None:
            return None
        if self.reason == "ambiguous":
            return f"ambiguous: several incompatible numbers ({', '.join(map(str, self.numbers))})"
        if self.reason == "not_a_count":
            return f"not_a_count: {self.detail or 'the reply states no valid count'}"
        return "no_number: the reply states no count"


_NONE_RE = re.compile(r"\bnone\b", re.IGNORECASE)
_ANSWER_HEAD = re.compile(r"\banswer[ \t]*[:=][ \t]*\**[ \t]*", re.IGNORECASE)
_JOIN = re.compile(r"[ \t]*(?:-|\u2013|\u2014|to|or|,[ \t]*or|/|~|and|,)[ \t]*", re.IGNORECASE)


def extract_count(
    text: Any, *, options: Sequence[str] | None = None, attribute: Sequence[str] | str | None = None
) -> Extraction:
    """The count a reply commits to, strictly (*CounterCount*, Section 3: regular expressions
    first; several numbers go to the judge).

    A reasoning block (``<think>...</think>``) is removed first. ``ANSWER: n`` lines win when
    they hold a number: each must state exactly one count (``ANSWER: 3 or 4``, ``ANSWER: -1``,
    ``ANSWER: at least 5`` are ``not_a_count``), and answer lines that disagree are ``ambiguous``. Otherwise every count in the reply is collected:
    digits, number words ("three", "twenty-one" -- MCQ options are words), "none", and, given
    ``attribute`` names, "no legs" (0) and "a single leg" (1). One distinct value is the answer;
    a reply whose numbers are only a range or alternatives (``3-4 legs``, ``three or four``) is
    ``not_a_count``; several incompatible values otherwise are no answer (``ambiguous``: the
    judge step of ``countgym.analysis.cf`` decides those, as the paper's Appendix B.2 does).
    Numbers are read with the count grammar of ``countgym.envs.numbers``: a negative, decimal,
    exponent, bound, approximate, ambiguously grouped, mixed-script or out-of-range number is not
    a count (``not_a_count`` when it is the only number, ``ambiguous`` beside others), and neither
    is a non-string reply. ``options`` (MCQ option words) need no special casing because options
    are number words; the argument is accepted so a wrapper with option letters can pass them.
    Linear in the length.
    """
    del options  # number words already cover the MCQ options
    if not isinstance(text, str):
        return Extraction(None, "not_a_count", (), f"not a text reply ({type(text).__name__})")
    body = strip_reasoning(text)
    numbers = count_mentions(body)
    heads = [m.end() for m in _ANSWER_HEAD.finditer(body)]
    if heads:
        # Each ANSWER span (to the next ANSWER or the end of its line) must state one count;
        # answer lines that disagree are several numbers (the judge's case).
        stated: list[Number] = []
        for k, start in enumerate(heads):
            stop = body.find("\n", start)
            stop = len(body) if stop < 0 else stop
            if k + 1 < len(heads):
                stop = min(stop, heads[k + 1])
            span = [n for n in numbers if start <= n.start < stop]
            if not span and NONE_SPAN.fullmatch(body, start, stop):
                span = [Number(start, stop, 0, "count", True)]  # "ANSWER: none"
            if not span:
                continue
            ex = _decide(span, "answer_line")
            if ex.value is None:
                if ex.reason == "ambiguous":
                    shown = ", ".join(map(str, ex.numbers))
                    return Extraction(None, "not_a_count", ex.numbers, f"several numbers in one answer line ({shown})")
                return ex
            stated.extend(span)
        if stated:
            return _decide(stated, "answer_line")
    found: list[Number] = list(numbers)
    found += [Number(m.start(), m.end(), 0, "count", True) for m in _NONE_RE.finditer(body)]
    found += _attribute_counts(body, attribute)
    if not found:
        return Extraction(None, "no_number")
    found.sort(key=lambda n: n.start)
    ex = _decide(found, "number")
    if ex.reason == "ambiguous" and _only_alternatives(body, found):
        shown = ", ".join(map(str, ex.numbers))
        return Extraction(None, "not_a_count", ex.numbers, f"a range or alternatives ({shown})")
    return ex


def _only_alternatives(body: str, found: Sequence[Number]) -> bool:
    """True when the reply's numbers are one run joined only by ``-``, ``to``, ``or``, ``/``, ``,``."""
    return len(found) >= 2 and all(
        _JOIN.fullmatch(body, a.end, b.start) is not None for a, b in zip(found, found[1:], strict=False)
    )


def _decide(found: Sequence[Number], reason: str) -> Extraction:
    """One valid count is the answer; anything else (several, not a count) is not. A negated
    number (``not 2``) is set aside: it is never the answer."""
    stated = [n for n in found if n.kind != "negated"]
    if not stated:
        return Extraction(None, "not_a_count", (), "not a count (negated)")
    found = stated
    counts: list[int] = []
    seen: set[int] = set()
    for n in found:
        if n.value is not None and n.value not in seen:
            seen.add(n.value)
            counts.append(n.value)
    bad = [n.kind for n in found if n.kind != "count"]
    if len(counts) == 1 and not bad:
        return Extraction(counts[0], reason, tuple(counts))
    if not counts and bad:
        return Extraction(None, "not_a_count", (), f"not a count ({bad[0].replace('_', ' ')})")
    return Extraction(None, "ambiguous", tuple(counts))


def _attribute_counts(body: str, attribute: Sequence[str] | str | None) -> list[Number]:
    if not attribute:
        return []
    names = [attribute] if isinstance(attribute, str) else list(attribute)
    alt = "|".join(re.escape(a) for a in sorted(set(names), key=len, reverse=True) if a)
    if not alt:
        return []
    out: list[Number] = []
    for m in re.finditer(rf"\bno\s+(?:{alt})\b", body, re.IGNORECASE):
        out.append(Number(m.start(), m.end(), 0, "count", True))
    for m in re.finditer(rf"\b(?:a|an)\s+(?:single\s+)?(?:{alt})\b", body, re.IGNORECASE):
        out.append(Number(m.start(), m.end(), 1, "count", True))
    return out


# =========================================================================== environment
class MaskSpace(spaces.Space[np.ndarray]):
    """Boolean (H, W) masks of any size with 1 <= H, W <= ``max_side`` (the Mask-BB region)."""

    def __init__(self, max_side: int = MAX_LONG_SIDE, seed: int | np.random.Generator | None = None):
        self.max_side = int(max_side)
        super().__init__(shape=None, dtype=np.bool_, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        h, w = self.np_random.integers(1, min(self.max_side, 64) + 1, size=2)
        return self.np_random.integers(0, 2, size=(int(h), int(w))).astype(bool)

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, np.ndarray) and x.dtype == np.bool_ and x.ndim == 2
            and 1 <= x.shape[0] <= self.max_side and 1 <= x.shape[1] <= self.max_side
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MaskSpace) and other.max_side == self.max_side


refuse_flattening(MaskSpace, "its masks vary in size with the image")
shm.register_bytes_space(MaskSpace, lambda sp: sp.max_side * sp.max_side, shm.encode_array, shm.decode_array)


class CounterCountEnv(gym.Env):
    """Count one attribute of a subject in a factual or counterfactual image (one step).

    ## Description
    The evaluation of *CounterCount*: the policy sees an image of a familiar subject (a dog, a
    hand, a car, ...) and a question about how many of one attribute it has (legs, fingers,
    wheels, ...). Counterfactual images show an edited count; models that recall the canonical
    count instead of counting are "biased".

    ## Action Space
    ``MessageSpace``: the model's reply text (or a ``Reply`` carrying text, usage and cost).
    The count is extracted strictly: ``ANSWER:`` lines, else digits and number words (MCQ options
    are words); several incompatible numbers are no answer. A programmatic policy may instead
    return a typed ``Answer(count=N)`` (alone or as ``Reply.action``), taken as is.

    ## Observation Space
    | key      | space         | content                                                   |
    |----------|---------------|-----------------------------------------------------------|
    | image    | ImageSpace    | uint8 H x W x 3 (blurred outside the attribute box if on); a ``StoredView`` (``countgym.envs.stored_view``, decoded when read) for a stimulus read from a file |
    | text     | MessageSpace  | the question (MCQ or OE, optional cue, generic name)       |
    | region   | MaskSpace     | Mask-BB of the shown image; only with ``expose_region``    |

    ## Rewards
    ``reward="exact"`` (default): 1 if the extracted count is correct, else 0; or any reward of
    ``countgym.envs.rewards`` / a callable ``(state, stimulus) -> float``.

    ## Starting State
    ``reset(seed=..., options={"stimulus_id": ...})``: the named stimulus, or one drawn with the
    environment's RNG from the pool (optionally only ``kind="factual"`` or ``"cf"`` items).

    ## Episode End
    - Termination: after the one step (``end="answer"`` with a count, ``"invalid"`` without).
    - Truncation: a failed model call (``Reply.error``; ``end="error"``).

    ## Information
    At reset: ``format``, ``options`` (MCQ option words). After the step: ``action`` (the
    extraction), ``parse_error``; and, the episode having ended, ``truth`` (n, canonical and CF
    count, kind), ``outcome`` (correct / biased / other / no_answer), ``stimulus_id``,
    ``answer`` and ``end``. ``episode_record()`` returns the ``EpisodeRecord`` (kept out of
    ``info`` because its timestamps would break same-seed determinism checks).

    ## Arguments
    ``dataset`` ("countercount", a folder, a released-data root or a ``Dataset``),
    ``stimulus_ids``, ``kind`` (None, "factual", "cf"), ``question`` ("mcq", "oe"), ``cue``,
    ``generic``, ``blur`` with ``blur_radius`` (48) and ``feather`` (4), ``thinking`` and
    ``attention`` (recorded: they act in the backend), ``expose_region``, ``reward``, ``arm``,
    ``model``, ``render_mode``.

    ## Version History
    - v0: initial release. ``image`` became a lazy ``StoredView`` (same pixels once decoded)
      for stimuli read from files.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 1}

    # --- task hooks (read by ``countgym.tasks``; see the module docstring there) ---
    task: ClassVar[str] = "countercount"
    MEDIA: ClassVar[str] = "image"
    """What each stimulus must have on disk: an ``image`` or sampled ``frames``."""
    CELL_OPTIONS: ClassVar[frozenset[str]] = frozenset(
        {"question", "cue", "generic", "blur", "blur_radius", "feather", "kind", "reward", "attention"}
    )

    @classmethod
    def claims_dataset(cls, dataset: str) -> bool:
        """The ``countercount`` battery and folders whose manifest holds CounterCount pairs."""
        if str(dataset) == "countercount":
            return True
        head = manifest_head(str(dataset))
        meta = (head or {}).get("meta") or {}
        return meta.get("battery") == "countercount" or ("pair_id" in meta and meta.get("kind") in ("factual", "cf"))

    @classmethod
    def load_dataset(cls, dataset: str) -> Dataset:
        """The battery, a dataset folder or the root of the released CounterCount data."""
        from countgym.scenes.counterfactual import resolve_countercount

        return resolve_countercount(dataset)

    @classmethod
    def cell_options(
        cls, *, tools: Sequence[str] | None = None, budget: int | None = None, **options: Any
    ) -> dict[str, Any]:
        """Environment options for a policy that is not a CounterCount arm: the question format
        and the interventions (``question``, ``cue``, ``generic``, ``blur``, ...)."""
        return single_step_cell_options("CounterCount", cls.CELL_OPTIONS, tools, budget, options)

    def __init__(
        self,
        dataset: str | Dataset = "countercount",
        *,
        stimulus_ids: Sequence[str] | None = None,
        kind: Literal["factual", "cf"] | None = None,
        question: QuestionFormat = "mcq",
        cue: bool = False,
        generic: bool = False,
        blur: bool = False,
        blur_radius: float = 48.0,
        feather: float = 4.0,
        thinking: bool | None = None,
        attention: str | None = None,
        expose_region: bool = False,
        reward: str | RewardFn = "exact",
        arm: str = "countercount",
        model: str = "unknown",
        render_mode: str | None = None,
    ) -> None:
        from countgym.scenes.counterfactual import resolve_countercount

        self.dataset, self.dataset_name = resolve_dataset_arg(dataset, resolve_countercount)
        if question not in ("mcq", "oe"):
            raise ValueError(f"question must be 'mcq' or 'oe', got {question!r}")
        if kind not in (None, "factual", "cf"):
            raise ValueError(f"kind must be None, 'factual' or 'cf', got {kind!r}")
        if blur_radius < 0 or feather < 0:
            raise ValueError(f"blur_radius and feather must be >= 0, got {blur_radius} and {feather}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        pool = stimulus_pool(self.dataset, stimulus_ids)
        if kind is not None:
            pool = [sid for sid in pool if self.dataset[sid].meta.get("kind") == kind]
        if not pool:
            raise ValueError("the stimulus selection is empty")
        if generic:
            _check_generic_categories(self.dataset, pool)
        self._pool = pool
        self.kind, self.question_format = kind, question
        self.cue, self.generic, self.blur = bool(cue), bool(generic), bool(blur)
        self.blur_radius, self.feather = float(blur_radius), float(feather)
        self.thinking, self.attention = thinking, attention
        self.expose_region = bool(expose_region)
        self.reward_fn = resolve_reward(reward)
        self.reward_name = reward if isinstance(reward, str) else getattr(reward, "__name__", "custom")
        self.arm, self.model = arm, model
        self.render_mode = render_mode
        # The runner's Task needs these; a single-step task has only the answer.
        self.tools: tuple[str, ...] = ("answer",)
        self.budget = 0

        obs: dict[str, spaces.Space[Any]] = {"image": ImageSpace(MAX_LONG_SIDE), "text": MessageSpace()}
        if self.expose_region:
            obs["region"] = MaskSpace(MAX_LONG_SIDE)
        self.observation_space = spaces.Dict(obs)
        self.action_space = MessageSpace(accepts=(Reply,))

        self.state: EpisodeState | None = None
        self.stimulus: Stimulus | None = None
        self.question: Question | None = None
        self.extraction: Extraction | None = None
        self._obs: dict[str, Any] | None = None
        self._steps: list[StepRecord] = []
        self._episode: dict[str, Any] = {}

    # ------------------------------------------------------------------ gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        stim = self.dataset[pick_stimulus_id(self.np_random, self._pool, options)]
        self.stimulus = stim
        # The image shown is shared by every episode of the stimulus and setting
        # (``countgym.envs.originals``): decoded (and blurred) once, encoded once; unblurred, it
        # is sent as its own file. The pixels are ``shown_image``'s, which replay calls.
        loaded = load_original(self.dataset, stim, MAX_LONG_SIDE)
        box = shown_box(stim, loaded.stored_size, loaded.size)
        if self.blur:
            loaded = derived_original(loaded, ("blur", self.blur_radius, self.feather, tuple(box)), self._blurred(stim, box))
        image, stored_size, shown = loaded.image, loaded.stored_size, loaded.first_view()
        self.question = build_question(stim, format=self.question_format, cue=self.cue, generic=self.generic)
        self.state = EpisodeState(original=image, calls_left=0)
        self.extraction = None
        self._steps = []
        self._episode = new_episode(seed, options, stored_size=stored_size)
        obs: dict[str, Any] = {"image": shown, "text": self.question.text}
        if self.expose_region:
            obs["region"] = self._region(stim, image.size, box)
        self._obs = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in obs.items()}
        info = {"format": self.question_format, "options": list(self.question.option_words)}
        return obs, info

    def _blurred(self, stim: Stimulus, box: list[float]) -> Any:
        """What the blur intervention draws on the fitted image (``shown_image``'s blur)."""
        if not stim.meta.get("bbox"):
            raise ValueError(f"stimulus {stim.id!r} has no meta.bbox: the blur intervention needs one")
        from countgym.scenes.counterfactual import blur_outside

        return lambda image: blur_outside(image, [box], radius=self.blur_radius, feather=self.feather)

    def prompt_text(self, stimulus: Stimulus) -> dict[str, str]:
        """The text of the first observation for ``stimulus``: ``user``, the question with its
        options (MCQ) under this environment's format, cue and generic-name settings."""
        q = build_question(stimulus, format=self.question_format, cue=self.cue, generic=self.generic)
        return {"system": "", "user": q.text}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self.state is None or self.state.ended or self.stimulus is None:
            raise RuntimeError("the episode has ended (or never started); call reset()")
        st, stim = self.state, self.stimulus
        rec = StepRecord(index=0)
        terminated = truncated = False
        # The reply is stored and parsed within REPLY_LIMIT (its tail); a non-string is not a reply.
        text: Any = action
        if isinstance(action, Reply):
            rec.usage, rec.cost, rec.latency_s = action.usage, action.cost, action.latency_s
            text = action.text
        if isinstance(text, str):
            text = set_reply(rec, text)
        typed = action if isinstance(action, Answer) else getattr(action, "action", None)
        if isinstance(action, Reply) and action.error is not None:
            st.end, st.error = "error", action.error
            truncated = True
        elif isinstance(typed, Answer):
            # A programmatic policy's typed answer: no text to extract a count from.
            rec.action = {"tool": "answer", "count": typed.count, "method": "typed answer"}
            st.answer, st.end = typed.count, "answer"
            terminated = True
        else:
            ex = extract_count(
                text, options=self.question.option_words if self.question else None,
                attribute=(stim.obj, stim.obj_sing),
            )
            self.extraction = ex
            if ex.value is not None:
                rec.action = {"tool": "answer", "count": ex.value, "method": ex.reason}
                st.answer, st.end = ex.value, "answer"
            else:
                rec.parse_error = ex.error
                st.answer, st.end = None, "invalid"
            terminated = True
        self._steps = [rec]
        st.ended = True
        reward = float(self.reward_fn(st, stim))
        info: dict[str, Any] = {
            "action": rec.action,
            "parse_error": rec.parse_error,
            "truth": _truth(stim),
            "outcome": outcome(st.answer, stim),
            "stimulus_id": stim.id,
            "answer": st.answer,
            "end": st.end,
        }
        # None values are left out: vector envs type each batched key by its first value.
        info = {k: v for k, v in info.items() if v is not None}
        assert self._obs is not None
        # The final observation repeats the question's; a copy, so callers never share arrays.
        obs = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in self._obs.items()}
        return obs, reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        """The image shown (``render_mode="rgb_array"``)."""
        if self.render_mode != "rgb_array" or self._obs is None:
            return None
        return np.asarray(self._obs["image"])

    def close(self) -> None:
        self.state = None

    # ------------------------------------------------------------------ records
    def episode_record(self) -> EpisodeRecord:
        """The episode as an ``EpisodeRecord`` (truth included once it has ended)."""
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
            template_hash=tpl.TEMPLATE_HASH,
            extracted_by=None if st.end in (None, "error") else ("rule" if st.answer is not None else "none"),
        )

    def options(self) -> dict[str, Any]:
        """The environment options as logged (the question format and the interventions)."""
        return {
            "task": "countercount",
            "question": self.question_format,
            "cue": self.cue,
            "generic": self.generic,
            "blur": self.blur,
            "blur_radius": self.blur_radius,
            "feather": self.feather,
            "thinking": self.thinking,
            "attention": self.attention,
            "kind": self.kind,
            "reward": self.reward_name,
        }

    # ------------------------------------------------------------------ helpers
    def _region(self, stim: Stimulus, size: tuple[int, int], box: list[float]) -> np.ndarray:
        """Mask-BB in the frame of the shown image (the attribute box when no mask is stored)."""
        from countgym.scenes.counterfactual import box_mask, load_mask, mask_bb

        w, h = size
        rel = stim.meta.get("mask")
        if rel:
            # Inside the dataset folder and a regular file, like every image path.
            mask = load_mask(str(self.dataset.media_path(stim, str(rel), "mask")), size=(w, h))
            return mask_bb(mask, box)
        return box_mask(box, (h, w))


def shown_image(
    stored: Image.Image,
    stim: Stimulus,
    *,
    blur: bool = False,
    blur_radius: float = 48.0,
    feather: float = 4.0,
) -> tuple[Image.Image, list[float]]:
    """The image the policy sees and the attribute box in its frame.

    The stored image fitted to ``MAX_LONG_SIDE``, blurred outside the attribute box with the
    blur intervention (*CounterCount*, Section 4). The environment and replay both call this,
    so a replayed observation is the observation.
    """
    image = fit_long_side(stored, MAX_LONG_SIDE)
    box = shown_box(stim, stored.size, image.size)
    if blur:
        from countgym.scenes.counterfactual import blur_outside

        if not stim.meta.get("bbox"):
            raise ValueError(f"stimulus {stim.id!r} has no meta.bbox: the blur intervention needs one")
        image = blur_outside(image, [box], radius=blur_radius, feather=feather)
    return image, box


def shown_box(stim: Stimulus, stored_size: tuple[int, int], shown_size: tuple[int, int]) -> list[float]:
    """The stimulus's attribute box (``meta.bbox``, stored pixels) in the frame of the image shown."""
    scale = (shown_size[0] / stored_size[0], shown_size[1] / stored_size[1])
    return [float(v) * s for v, s in zip(stim.meta.get("bbox") or [0, 0, 0, 0], (*scale, *scale), strict=True)]


def outcome(answer: int | None, stimulus: Stimulus) -> str:
    """``correct``, ``biased`` (a CF answered with the canonical count), ``other`` or ``no_answer``."""
    if answer is None:
        return "no_answer"
    if answer == stimulus.n:
        return "correct"
    canonical = stimulus.meta.get("canonical_count")
    if stimulus.meta.get("kind") == "cf" and canonical is not None and answer == int(canonical):
        return "biased"
    return "other"


def _truth(stim: Stimulus) -> dict[str, Any]:
    m = stim.meta
    return {"n": stim.n, "canonical_count": m.get("canonical_count"), "cf_count": m.get("cf_count"), "kind": m.get("kind")}


def _check_generic_categories(dataset: Dataset, pool: Sequence[str]) -> None:
    """Every stimulus of the pool has a category with a generic name (Appendix C.4), checked
    before any episode; the first unknown label is named in one line."""
    from countgym.errors import UserError

    seen: set[str] = set()
    for sid in pool:
        label = str(dataset[sid].meta.get("category") or "")
        if label in seen:
            continue
        seen.add(label)
        if not label.strip():
            raise UserError(f"stimulus {sid!r} has no meta.category: the generic-name intervention needs one")
        try:
            tpl.generic_name(label)
        except UserError as e:
            raise UserError(f"{e} (stimulus {sid!r})") from None
