"""The one count grammar (countgym.envs.numbers), everywhere: known answers for every reply the
issues name, in the image (ANSWER text, JSON and native answer calls), video and CounterCount
environments, the scripted arms and the audit's parser/judge reading; a fuzz against an
independent reference reading; and linear time on hostile replies."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countgym.agents.arms import parse_announced
from countgym.analysis.extraction import _read_value
from countgym.envs.actions import Answer, Reply
from countgym.envs.cf_env import CounterCountEnv
from countgym.envs.cf_env import extract_count as cf_extract
from countgym.envs.extract import Target, extract_count
from countgym.envs.image_env import CountImageEnv
from countgym.envs.numbers import MAX_COUNT, MINUS_SIGNS, parse_count, read_count, scan_numbers
from countgym.envs.parser import parse_action
from countgym.envs.video_env import CountVideoEnv
from countgym.scenes.counterfactual import make_countercount
from countgym.scenes.video import make_countvideo
from countgym.stimulus import Dataset

RED_CUBE = Target("cube", "red")
QUESTION = "How many red cubes are in this video?"

# Every way of writing a count the issues name (issue 23, deliverable 1), and what it states.
ISSUE_EXAMPLES: list[tuple[str, int | None]] = [
    ("one hundred and five", 105),
    ("twenty one", 21),
    ("twenty-one", 21),
    ("3 or 4", None),
    ("2 thousand", 2000),
    ("two thousand", 2000),
    ("1 000", None),
    ("3-4", None),
    ("at least 5", None),
    ("5+", None),
    ("over 10", None),
    ("7,5", None),
    ("10^2", None),
    ("1\u200b2", None),
    ("\u20131", None),  # en dash
    ("\uff0d1", None),  # full-width minus
    ("\ufe631", None),  # small minus
    ("\u22121", None),  # minus sign
    ("- 1", None),
    ("minus 1", None),
    ("negative 2", None),
    ("1\u0663", None),  # mixed scripts
    ("\u0661\u0663", 13),  # one script (Arabic-Indic)
    ("\uff11\uff13", 13),  # one script (full-width)
    ("1,000", 1000),
    ("1,00", None),
    ("about 12", None),
    ("~12", None),
    ("12 or so", None),
    ("a dozen", 12),
    ("7.5", None),
    ("1e20", None),
    ("0x10", None),
    ("12", 12),
    ("a hundred", 100),
    ("one million", 1_000_000),
    ("one million and one", None),  # above MAX_COUNT
    ("two thousand three hundred and forty-five", 2345),
]


def _json_answer(text: str) -> int | None:
    action = parse_action(json.dumps({"tool": "answer", "count": text})).action
    return action.count if isinstance(action, Answer) else None


def _image_answer(text: str) -> int | None:
    action = parse_action(f"I looked carefully.\nANSWER: {text}").action
    return action.count if isinstance(action, Answer) else None


READERS = {
    "image ANSWER line": _image_answer,
    "image JSON answer": _json_answer,
    "video answer line": lambda t: extract_count(f"ANSWER: {t}", question=QUESTION, target=RED_CUBE).value,
    "video free text": lambda t: extract_count(t, question=QUESTION, target=RED_CUBE).value,
    "CounterCount answer line": lambda t: cf_extract(f"ANSWER: {t}").value,
    "CounterCount free text": lambda t: cf_extract(t).value,
    "scripted arm": lambda t: parse_announced(f"ANSWER: {t}"),
    "audit parser": lambda t: _read_value(t, judge=False),
    "audit judge": lambda t: _read_value(t, judge=True),
    "answer span": lambda t: read_count(t)[0],
}


@pytest.mark.parametrize(("text", "expected"), ISSUE_EXAMPLES)
@pytest.mark.parametrize("reader", sorted(READERS))
def test_issue_examples_read_the_same_everywhere(reader: str, text: str, expected: int | None) -> None:
    assert READERS[reader](text) == expected


def test_parse_count_kinds_say_why() -> None:
    assert parse_count("3 or 4") == (None, "several numbers (3, 4)")
    assert parse_count("at least 5") == (None, "bound")
    assert parse_count("\u20131") == (None, "negative")
    assert parse_count("1\u200b2") == (None, "broken")
    assert parse_count("1\u0663") == (None, "mixed_script")
    assert parse_count("1 000") == (None, "separator")
    assert parse_count("about 12") == (None, "approximate")
    assert parse_count("twelve") == (12, "count") and parse_count("+5") == (5, "count")


def test_glued_and_ordinal_words_are_not_mentions() -> None:
    assert scan_numbers("3D 10s 1st 1920x1080 twenty-first") == []
    assert [n.value for n in scan_numbers("- 3 red cubes\n- 4 blue spheres")] == [3, 4]  # list bullets


def test_native_tool_call_answers_follow_the_grammar(tiny_dataset: Dataset) -> None:
    def answer(count: Any) -> dict[str, Any]:
        return {"id": "c0", "type": "function", "function": {"name": "answer", "arguments": json.dumps({"count": count})}}

    for count, ok in (("3 or 4", False), ("\u20131", False), ("twenty one", True), (-1, False), (2, True)):
        env = CountImageEnv(tiny_dataset, tools=("tag",), budget=1, protocol="native")
        env.reset(seed=0, options={"stimulus_id": "two"})
        *_, info = env.step(Reply(text="", tool_calls=[answer(count)]))
        assert (info.get("parse_error") is None) == ok, count


# --------------------------------------------------------------------------- the environments
@pytest.fixture(scope="module")
def video_ds(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    out = make_countvideo(tmp_path_factory.mktemp("nv") / "cv", limit=1, size=(48, 27), progress=False, workers=1)
    return Dataset(out)


@pytest.fixture(scope="module")
def cf_ds(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return Dataset(make_countercount(tmp_path_factory.mktemp("nf"), limit=2, progress=False))


NO_ANSWER = [t for t, v in ISSUE_EXAMPLES if v is None and t not in ("a dozen",)]


@pytest.mark.parametrize("text", NO_ANSWER)
def test_no_answer_in_every_environment(video_ds: Dataset, cf_ds: Dataset, tiny_dataset: Dataset, text: str) -> None:
    reply = f"ANSWER: {text}"
    for env in (CountVideoEnv(video_ds), CounterCountEnv(cf_ds), CountImageEnv(tiny_dataset, prompt="direct")):
        env.reset(seed=0)
        *_, info = env.step(reply)
        rec = env.episode_record()
        assert rec.answer is None and info["end"] == "invalid", (type(env).__name__, text)
        assert rec.steps[0].parse_error


def test_direct_run_no_longer_scores_an_alternative(tiny_dataset: Dataset) -> None:
    env = CountImageEnv(tiny_dataset, prompt="direct")
    env.reset(seed=0, options={"stimulus_id": "two"})
    _, reward, *_ = env.step("ANSWER: 2 or 3")
    assert reward == 0.0 and env.episode_record().answer is None
    env.reset(seed=0, options={"stimulus_id": "two"})
    _, reward, *_ = env.step("ANSWER: two")
    assert reward == 1.0


# --------------------------------------------------------------------------- video reply shapes (issue 22, item 7)
VIDEO_SHAPES: list[tuple[str, int | None]] = [
    ("Frame 1 shows 10 red cubes and the later frames add 14 more: 10 + 14 = 24, so 24.", 24),
    ("The left group has 12 and the right group has 12, so 24.", 24),
    ("I see 3 rows of 8 red cubes, 3 x 8, therefore 24.", 24),
    ("There are 4 red cubes on the left and 5 on the right, so 9.", 9),
    ("Frame 2 shows 11, frame 9 shows 13 red cubes.", None),
    ("Frame 2: 11. Frame 9: 13 red cubes.", None),
    ("In frame 2 there are 11, in frame 9 there are 13 red cubes.", None),
    ("Frame 2 shows 11, frame 9 shows 11 red cubes.", 11),
    ("The camera moves so 3 cubes leave the view; there are 12 red cubes.", None),
    ("Frame 2 shows 11, frame 9 shows 13 red cubes, so 13 in total.", 13),
]


@pytest.mark.parametrize(("text", "expected"), VIDEO_SHAPES)
def test_video_conclusions_and_per_frame_tallies(text: str, expected: int | None) -> None:
    assert extract_count(text, question=QUESTION, target=RED_CUBE).value == expected
    assert extract_count(text, question=QUESTION).value == expected


# --------------------------------------------------------------------------- fuzz against a reference
_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ZEROS = (0x30, 0x660, 0x6F0, 0x966, 0x9E6, 0xE50, 0xFF10, 0x1D7CE)
_INVISIBLES = ("\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\ufeff", "\u2062")


def _below_100(n: int, hyphen: bool) -> str:
    if n < 20:
        return _UNITS[n]
    tens, unit = divmod(n, 10)
    return _TENS[tens] + (("-" if hyphen else " ") + _UNITS[unit] if unit else "")


def _below_1000(n: int, hyphen: bool, use_and: bool, article: bool) -> str:
    hundreds, rest = divmod(n, 100)
    parts = []
    if hundreds:
        parts.append(("a" if article and hundreds == 1 else _UNITS[hundreds]) + " hundred")
    if rest:
        if hundreds and use_and:
            parts.append("and")
        parts.append(_below_100(rest, hyphen))
    return " ".join(parts)


def words(n: int, *, hyphen: bool = True, use_and: bool = True, article: bool = False) -> str:
    """The reference English rendering of 0 <= n < 10**9."""
    if n == 0:
        return "zero"
    parts = []
    for scale, name in ((10**6, "million"), (10**3, "thousand")):
        if n >= scale:
            head, n = divmod(n, scale)
            parts.append(_below_1000(head, hyphen, use_and, article) + " " + name)
    if n:
        if parts and use_and and n < 100:
            parts.append("and")
        parts.append(_below_1000(n, hyphen, use_and, article))
    return " ".join(parts)


def _digits(n: int, zero: int) -> str:
    return "".join(chr(zero + int(c)) for c in str(n))


@st.composite
def renderings(draw: st.DrawFn) -> tuple[str, int | None]:
    """A number in some notation and the reference reading of it (None: no count)."""
    n = draw(st.one_of(st.integers(0, 60), st.integers(0, MAX_COUNT), st.integers(MAX_COUNT + 1, 10**8)))
    notation = draw(st.sampled_from(["digits", "script", "grouped", "words", "scaled"]))
    if notation == "digits":
        text = str(n)
    elif notation == "script":
        text = _digits(n, draw(st.sampled_from(_ZEROS)))
    elif notation == "grouped":
        text = f"{n:,}"
    elif notation == "scaled":
        head = draw(st.integers(1, 999))
        scale, name = draw(st.sampled_from([(100, "hundred"), (1000, "thousand"), (10**6, "million")]))
        text, n = f"{head} {name}", head * scale
    else:
        text = words(n, hyphen=draw(st.booleans()), use_and=draw(st.booleans()), article=draw(st.booleans()))
    clean: int | None = n if n <= MAX_COUNT else None
    attack = draw(st.sampled_from(["none", "none", "negative", "bound", "approximate", "range", "decimal",
                                   "exponent", "invisible", "mixed", "spaced"]))
    other = draw(st.integers(0, 99).filter(lambda m: m != n))
    if attack == "none":
        return text, clean
    if attack == "negative":
        sign = draw(st.sampled_from([*MINUS_SIGNS, "minus ", "negative ", "- ", "\u2212 "]))
        return sign + text, None
    if attack == "bound":
        form = draw(st.sampled_from(["at least {}", "more than {}", "{}+", "over {}", "{} or more", ">{}",
                                     "\u2265 {}", "up to {}", "fewer than {}", "at most {}"]))
        return form.format(text), None
    if attack == "approximate":
        form = draw(st.sampled_from(["about {}", "~{}", "approximately {}", "{} or so", "\u2248{}", "roughly {}",
                                     "around {}", "nearly {}"]))
        return form.format(text), None
    if attack == "range":
        form = draw(st.sampled_from(["{}-{}", "{} to {}", "{} or {}", "between {} and {}", "{}\u2013{}", "{} / {}"]))
        first, second = (text, str(other)) if draw(st.booleans()) else (str(other), text)
        return form.format(first, second), None
    if notation in ("words", "scaled"):
        return text, clean  # digit-level attacks need digits
    if attack == "decimal":
        return text + draw(st.sampled_from([".5", ",5", ".25"])), None
    if attack == "exponent":
        return text + draw(st.sampled_from(["e3", "^2", "**2", "\u00b2", "e-1", "E+2"])), None
    if attack == "invisible" and len(text) >= 2:
        i = draw(st.integers(1, len(text) - 1))
        return text[:i] + draw(st.sampled_from(_INVISIBLES)) + text[i:], None
    if attack == "mixed" and notation in ("digits", "script") and len(text) >= 2:
        i = draw(st.integers(0, len(text) - 1))
        zero = ord(text[i]) - int(text[i])
        swap = draw(st.sampled_from([z for z in _ZEROS if z != zero]))
        return text[:i] + chr(swap + int(text[i])) + text[i + 1 :], None
    if attack == "spaced" and n >= 1000 and notation == "digits":
        return f"{n:,}".replace(",", draw(st.sampled_from([" ", "\u00a0", "\u202f", "'", "."]))), None
    return text, clean


@settings(max_examples=600, deadline=None)
@given(renderings())
def test_fuzz_every_reader_agrees_with_the_reference(case: tuple[str, int | None]) -> None:
    text, expected = case
    for name, reader in READERS.items():
        assert reader(text) == expected, (name, text)


_PIECES = [*"0123456789 ,.-+^e~x/%\u2013\u2212\u200b\u0663\uff11ab\n", "one", "hundred", "and", "minus",
           "at least", "or", "twenty", "thousand", "so", "frame", "ANSWER:", "dozen", "score", "gross", "lakh",
           "billion", "not", "none", "__", "x", "rows of", "Red cubes:"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
def test_fuzz_never_raises_and_never_returns_a_non_count(text: str) -> None:
    for reader in READERS.values():
        value = reader(text)
        assert value is None or (type(value) is int and 0 <= value <= MAX_COUNT)
    for n in scan_numbers(text):
        assert (n.value is None) == (n.kind != "count") and 0 <= n.start < n.end <= len(text)


def test_reference_renderer_is_right() -> None:
    assert words(105) == "one hundred and five" and words(21, hyphen=False) == "twenty one"
    assert words(2_345, use_and=False) == "two thousand three hundred forty-five"
    assert words(1_000_000) == "one million" and words(100, article=True) == "a hundred"
    rng = random.Random(0)
    for n in [rng.randrange(MAX_COUNT + 1) for _ in range(2000)]:
        assert parse_count(words(n, hyphen=rng.random() < 0.5, use_and=rng.random() < 0.5)) == (n, "count")


# --------------------------------------------------------------------------- linear time
HOSTILE = {
    "signs": "- " * 25_000,
    "minus words": "minus " * 8_000,
    "bounds": "at least " * 5_500,
    "approximations": "about ~" * 7_000,
    "invisible digits": "1\u200b" * 25_000,
    "spaced groups": "1 000 " * 8_000,
    "word chains": "one hundred and " * 3_000,
    "scales": "thousand million " * 3_000,
    "mixed scripts": "1\u0663" * 25_000,
    "frames": "frame 2 shows 11, " * 2_800,
    "conclusions": "so 24, " * 7_000,
    "products": "3 x " * 12_500,
    "groups": "4 rows of " * 5_000,
    "negations": "not " * 12_500,
    "multipliers": "two dozen " * 5_000,
    "emphasis": "__1__ " * 8_000,
    "labels": "Red cubes: 12. " * 3_300,
    "nested actions": '{"tool":"answer","n":' * 2_500 + '{"tool":"answer","count":3}' + "}" * 2_500,
}
"""About 50 KB each: a quadratic reading of any of them takes minutes."""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_100kb_replies_parse_in_linear_time(name: str) -> None:
    text = HOSTILE[name]
    start = time.perf_counter()
    extract_count(text, target=RED_CUBE, question=QUESTION)
    cf_extract(text, attribute=("legs", "leg"))
    parse_action(text + "\nANSWER: " + text[:5000])
    read_count(text)
    assert time.perf_counter() - start < 8.0
