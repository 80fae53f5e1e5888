"""One count grammar, really one: the same answers read the same in every task's reader.

A table of answer spans (multiplier words, negations, emphasis, ``none``, products, and what
must stay no answer) goes through every reader a count passes through: the image environment
(``ANSWER:`` line in the direct arm and in the tool loop, a JSON ``answer`` call, a native
tool call with its arguments as JSON text and as a JSON object), the CountVideoBench and
CounterCount environments, the Inspect scorer on each of the three, the scripted arms and the
audit's parser/judge reading. Every reader must give the table's value. Then the video rules
(the queried object's count, never a factor), the action parser's nesting rule, and fuzz.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countgym.agents.arms import parse_announced
from countgym.analysis.extraction import _read_value
from countgym.envs.actions import Answer, Reply, Tag
from countgym.envs.cf_env import CounterCountEnv
from countgym.envs.cf_env import extract_count as cf_extract
from countgym.envs.extract import Target, extract_count
from countgym.envs.image_env import CountImageEnv
from countgym.envs.native_tools import call_to_action
from countgym.envs.numbers import MAX_COUNT, parse_count, read_count, scan_numbers
from countgym.envs.parser import parse_action
from countgym.envs.video_env import CountVideoEnv
from countgym.scenes.counterfactual import make_countercount
from countgym.scenes.video import make_countvideo
from countgym.stimulus import Dataset

# (answer span, the count it states; None = no answer)
TABLE: list[tuple[str, int | None]] = [
    ("12", 12),
    ("__12__", 12),
    ("**12**", 12),
    ("_twelve_", 12),
    ("`12`", 12),
    ("12.", 12),
    ("none", 0),
    ("None.", 0),
    ("**none**", 0),
    ("zero", 0),
    # multiplier words, multiplied out exactly
    ("two dozen", 24),
    ("2 dozen", 24),
    ("2 dozens", 24),
    ("a dozen", 12),
    ("2 thousands", 2000),
    ("two thousands", 2000),
    ("3 hundreds", 300),
    ("3 score", 60),
    ("three score", 60),
    ("a gross", 144),
    ("2 gross", 288),
    # ... or no answer: out of range, refused, not exact
    ("1 billion", None),
    ("one billion", None),
    ("2 trillion", None),
    ("a googol", None),
    ("1 lakh", None),
    ("2 lakhs", None),
    ("1 crore", None),
    ("half a dozen", None),
    ("1.5 dozen", None),
    ("dozens", None),
    # negations
    ("not 12", None),
    ("not twelve", None),
    ("never 12", None),
    ("not exactly 12", None),
    ("12, not 13", 12),
    # products: the product, never a factor
    ("3 x 4", 12),
    ("3 \u00d7 4", 12),
    ("3 times 4", 12),
    ("3 x 4 = 12", 12),
    ("3 x 4 = 13", None),
    ("4 rows of 3", 12),
    ("1920 x 1080", None),
    # what stays no answer
    ("3 or 4", None),
    ("about 12", None),
    ("-12", None),
    (".7", None),
    ("7.e5", None),
    ("x_12", None),
]


@pytest.fixture(scope="module")
def video_ds(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    out = make_countvideo(tmp_path_factory.mktemp("og") / "cv", limit=1, size=(48, 27), progress=False, workers=1)
    return Dataset(out)


@pytest.fixture(scope="module")
def cf_ds(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return Dataset(make_countercount(tmp_path_factory.mktemp("og"), limit=1, progress=False))


def _step_answer(env: Any, action: Any) -> int | None:
    env.reset(seed=0)
    env.step(action)
    return env.episode_record().answer


def _native(arguments: Any) -> Reply:
    return Reply(text="", tool_calls=[{"id": "c0", "type": "function",
                                       "function": {"name": "answer", "arguments": arguments}}])


def _inspect_scorer(env_id: str, dataset: Dataset, arm: str) -> Callable[[str], int | None]:
    """The Inspect scorer's reading of a reply another solver gave (stepping the environment)."""
    from countgym.integrations.inspect import audit_scorer

    sid = dataset.ids()[0]
    score_fn = audit_scorer(env_id, arm, dataset, stimuli={"s0": sid})

    def read(text: str) -> int | None:
        state = SimpleNamespace(store=SimpleNamespace(get=lambda _key: None), sample_id="s0", epoch=1,
                                output=SimpleNamespace(completion=text))
        score = asyncio.run(score_fn(state, SimpleNamespace(text="")))
        return None if score.answer is None else int(score.answer)

    return read


@pytest.fixture(scope="module")
def readers(tiny_dataset: Dataset, video_ds: Dataset, cf_ds: Dataset) -> dict[str, Callable[[str], int | None]]:
    direct = CountImageEnv(tiny_dataset, prompt="direct")
    loop = CountImageEnv(tiny_dataset, tools=("tag",), budget=2)
    native = CountImageEnv(tiny_dataset, tools=("tag",), budget=2, protocol="native")
    video, cf = CountVideoEnv(video_ds), CounterCountEnv(cf_ds)
    q = "How many red cubes are in this video?"
    out: dict[str, Callable[[str], int | None]] = {
        "image direct ANSWER line": lambda t: _step_answer(direct, f"I counted them.\nANSWER: {t}"),
        "image tool loop ANSWER line": lambda t: _step_answer(loop, f"ANSWER: {t}"),
        "image JSON answer": lambda t: _step_answer(loop, json.dumps({"tool": "answer", "count": t})),
        "image native call, arguments as text": lambda t: _step_answer(native, _native(json.dumps({"count": t}))),
        "image native call, arguments as object": lambda t: _step_answer(native, _native({"count": t})),
        "video env": lambda t: _step_answer(video, f"ANSWER: {t}"),
        "CounterCount env": lambda t: _step_answer(cf, f"ANSWER: {t}"),
        "video rules, free text": lambda t: extract_count(t, question=q, target=Target("cube", "red")).value,
        "CounterCount rules, free text": lambda t: cf_extract(t).value,
        "scripted arm": lambda t: parse_announced(f"ANSWER: {t}"),
        "audit parser": lambda t: _read_value(t, judge=False),
        "audit judge": lambda t: _read_value(t, judge=True),
        "answer span": lambda t: read_count(t)[0],
        "count value": lambda t: parse_count(t)[0],
    }
    if importlib.util.find_spec("inspect_ai") is not None:  # the ``inspect`` extra
        for name, env_id, ds, arm in (("image", "countgym/DotArrays-v0", tiny_dataset, "direct"),
                                      ("video", "countgym/CountVideo-v0", video_ds, "video-p1"),
                                      ("CounterCount", "countgym/CounterCount-v0", cf_ds, "cf-mcq")):
            scorer = _inspect_scorer(env_id, ds, arm)
            out[f"Inspect scorer, {name}"] = lambda t, scorer=scorer: scorer(f"ANSWER: {t}")  # type: ignore[misc]
    return out


def test_every_reader_reads_the_table_alike(readers: dict[str, Callable[[str], int | None]]) -> None:
    assert importlib.util.find_spec("inspect_ai") is None or "Inspect scorer, video" in readers
    wrong = [
        f"{name}: {text!r} -> {got!r}, expected {expected!r}"
        for text, expected in TABLE
        for name, read in readers.items()
        if (got := read(text)) != expected
    ]
    assert not wrong, "\n".join(wrong)


def test_the_table_is_not_vacuous() -> None:
    # The readers disagreed on these before (issue 31); a table of only agreed cases proves nothing.
    before = {"two dozen": 2, "2 thousands": 2, "1 billion": 1, "not 12": 12, "3 x 4": 4, "4 rows of 3": 3}
    table = dict(TABLE)
    assert all(table[k] != v for k, v in before.items())
    assert {v is None for _, v in TABLE} == {True, False}


def test_scale_kinds_say_why() -> None:
    assert parse_count("1 billion") == (None, "out_of_range")
    assert parse_count("2 lakh") == (None, "scale")
    assert parse_count("not 12") == (None, "negated")
    assert parse_count("half a dozen") == (None, "fraction")
    assert parse_count("a googol") == (None, "out_of_range")
    assert parse_count(f"{MAX_COUNT // 12} dozen") == (MAX_COUNT // 12 * 12, "count")
    assert parse_count(f"{MAX_COUNT // 12 + 1} dozen") == (None, "out_of_range")
    assert parse_count("a gross error") == (None, "not a count")  # an adjective, not 144


# --------------------------------------------------------------------------- the video rules
RED = Target("cube", "red")
QUESTION = "How many red cubes are in this video?"
VIDEO: list[tuple[str, Target | None, int | None]] = [
    ("Red cubes: 12. Blue cubes: 3.", RED, 12),
    ("Blue cubes: 3. Red cubes: 12.", RED, 12),
    ("Red cubes: 12\nBlue cubes: 3", RED, 12),
    ("red cubes - 12, blue cubes - 3", RED, 12),
    ("There are 12 red cubes. Blue cubes: 3.", RED, 12),
    ("Red cubes: 12. Red cubes: 13.", RED, None),
    # the question names no object: several objects' counts are no answer
    ("Red cubes: 12. Blue cubes: 3.", None, None),
    ("12 red cubes and 3 blue spheres.", None, None),
    # products: the product or nothing, never a factor
    ("3 x 4", RED, 12),
    ("There are 4 rows of 3 red cubes.", RED, 12),
    ("4 rows of 3", RED, 12),
    ("I see 3 x 4 red cubes, so 12.", RED, 12),
    ("3 x 4 = 13", RED, None),
    ("10 + 14 = 24", RED, 24),
    ("The cubes form a 3 x 4 grid; I count 11 red cubes.", RED, 11),
    # negations
    ("There are 12 red cubes, not 13.", RED, 12),
    ("Not 12.", RED, None),
    ("ANSWER: none", RED, 0),
]


@pytest.mark.parametrize(("text", "target", "expected"), VIDEO)
def test_video_rules_read_the_queried_objects_count(text: str, target: Target | None, expected: int | None) -> None:
    question = QUESTION if target is not None else None
    assert extract_count(text, question=question, target=target).value == expected


def test_counts_in_a_video_env_episode(video_ds: Dataset) -> None:
    env = CountVideoEnv(video_ds)
    env.reset(seed=0)
    stim = env.stimulus
    assert stim is not None
    other = "blue" if stim.meta.get("color") != "blue" else "red"
    reply = f"{stim.meta['color'].capitalize()} {stim.obj_sing}s: {stim.n}. {other.capitalize()} {stim.obj_sing}s: 3."
    *_, info = env.step(reply)
    assert info["answer"] == stim.n, reply


# --------------------------------------------------------------------------- the action parser
def test_a_nested_action_does_not_win_over_the_top_level_one() -> None:
    nested = '{"tool":"answer","count":12,"note":{"tool":"tag","points":[[100,200]]}}'
    assert parse_action(nested).action == Answer(count=12)
    outer_tag = 'Plan: {"tool":"tag","points":[[100,200]],"then":{"tool":"answer","count":3}}'
    assert isinstance(parse_action(outer_tag).action, Tag)
    # Not JSON around it, or an enclosing object without a tool: the inner action is the action.
    assert parse_action('my plan {a: {"tool":"answer","count":3}}').action == Answer(count=3)
    assert parse_action('{"action": {"tool":"answer","count":3}}').action == Answer(count=3)
    # The last top-level action still wins.
    assert parse_action('{"tool":"answer","count":3} {"tool":"grid","on":true}').action is not None
    assert parse_action('{"tool":"grid","on":true} {"tool":"answer","count":3}').action == Answer(count=3)


def test_native_arguments_as_an_object_are_read(tiny_dataset: Dataset) -> None:
    call = {"id": "c0", "type": "function", "function": {"name": "answer", "arguments": {"count": 7}}}
    assert call_to_action(call) == {"count": 7, "tool": "answer"}
    # as attribute objects (a parsed reply), flat, double-encoded, or absent
    ns = SimpleNamespace(id="c0", function=SimpleNamespace(name="answer", arguments=SimpleNamespace(count=7)))
    assert call_to_action(ns) == {"count": 7, "tool": "answer"}
    assert call_to_action({"name": "answer", "arguments": {"count": 7}}) == {"count": 7, "tool": "answer"}
    assert call_to_action({"function": {"name": "answer", "arguments": json.dumps(json.dumps({"count": 7}))}}) == {
        "count": 7, "tool": "answer"}
    assert call_to_action({"function": {"name": "grid", "arguments": None}}) == {"tool": "grid"}
    assert isinstance(call_to_action({"function": {"name": "answer", "arguments": [1, 2]}}), str)
    env = CountImageEnv(tiny_dataset, tools=("tag",), budget=2, protocol="native")
    env.reset(seed=0, options={"stimulus_id": "two"})
    _, reward, terminated, *_ = env.step(_native({"count": 2}))
    assert terminated and reward == 1.0 and env.episode_record().answer == 2


def test_backend_keeps_object_arguments() -> None:
    from countgym.agents.backends.litellm_backend import _tool_calls_of

    # A reply body parsed into attribute objects (as the direct transport does), its arguments
    # sent as a JSON object: they were dropped (serialised as "").
    def obj(x: Any) -> Any:
        if isinstance(x, dict):
            return SimpleNamespace(**{k: obj(v) for k, v in x.items()})
        return [obj(v) for v in x] if isinstance(x, list) else x

    call = {"id": "c1", "type": "function", "function": {"name": "answer", "arguments": {"count": 12, "n": {"k": [1]}}}}
    msg = obj({"role": "assistant", "content": None, "tool_calls": [call]})
    [out] = _tool_calls_of(msg) or [None]
    assert out is not None and json.loads(out["function"]["arguments"]) == {"count": 12, "n": {"k": [1]}}
    assert call_to_action(out) == {"count": 12, "n": {"k": [1]}, "tool": "answer"}


# --------------------------------------------------------------------------- fuzz
_PIECES = ["1", "2", "12", " ", "x", "\u00d7", "times", "by", "rows of", "dozen", "dozens", "score", "gross",
           "thousands", "billion", "lakh", "googol", "a", "half", "not", "never", "none", "__", "_", "**", ".",
           ",", "-", "=", "red cubes", "Red cubes:", "blue cubes", "ANSWER:", "\n", "{", "}", '"tool"', ":",
           '"answer"', '"count"', "twelve", "two"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=40).map("".join))
def test_fuzz_no_reader_raises_and_every_count_is_bounded(text: str) -> None:
    values = [
        read_count(text)[0], parse_count(text)[0], parse_announced(text),
        extract_count(text, question=QUESTION, target=RED).value, extract_count(text).value,
        cf_extract(text, attribute=("legs", "leg")).value,
    ]
    action = parse_action(text).action
    if isinstance(action, Answer):
        values.append(action.count)
    for value in values:
        assert value is None or (type(value) is int and 0 <= value <= MAX_COUNT), (text, value)
    for n in scan_numbers(text):
        assert (n.value is None) == (n.kind != "count") and 0 <= n.start < n.end <= len(text)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2000), st.sampled_from(["dozen", "score", "gross", "thousand", "hundred", "million"]))
def test_fuzz_multipliers_multiply_out_exactly(n: int, word: str) -> None:
    factor = {"dozen": 12, "score": 20, "gross": 144, "thousand": 1000, "hundred": 100, "million": 10**6}[word]
    expected = n * factor if n * factor <= MAX_COUNT else None
    assert parse_count(f"{n} {word}")[0] == expected
    if word not in ("score", "gross"):  # "3 scores" are three scores; only the others have plurals
        assert read_count(f"ANSWER: {n:,} {word}s.", 8)[0] == expected
