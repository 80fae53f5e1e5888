"""CounterCount questions (Appendix B), strict count extraction and the single-step env."""

from __future__ import annotations

import itertools
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from countgym.envs import cf_templates as T
from countgym.envs.actions import Reply
from countgym.envs.cf_env import (
    CounterCountEnv,
    build_question,
    extract_count,
    mcq_counts,
    mcq_options,
)
from countgym.logs import Usage
from countgym.scenes.counterfactual import make_countercount, mask_bb
from countgym.stimulus import Dataset, Stimulus


@pytest.fixture(scope="module")
def cf_small(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return Dataset(make_countercount(tmp_path_factory.mktemp("cfenv"), limit=4, progress=False))


# --------------------------------------------------------------------------- distractors (B.1)
@pytest.mark.parametrize(
    ("ordinary", "anomalous", "expected"),
    [
        (4, 6, [6, 4, 5, 7]),  # gap > 1, addition: midpoint, max + 1
        (4, 2, [2, 4, 3, 5]),  # gap > 1, removal
        (5, 2, [2, 5, 3, 6]),  # gap > 1, odd sum: floor of the midpoint
        (8, 10, [10, 8, 9, 11]),
        (4, 0, [0, 4, 2, 5]),  # gap > 1 with c_a = 0: the midpoint is valid
        (2, 0, [0, 2, 1, 3]),
        (4, 5, [5, 4, 3, 6]),  # gap 1, addition: one below the minimum
        (4, 3, [3, 4, 2, 5]),  # gap 1, removal
        (1, 2, [2, 1, 4, 3]),  # gap 1, min - 1 = 0 invalid: fallback to max + 2
        (2, 1, [1, 2, 4, 3]),
        (1, 0, [0, 1, 3, 2]),  # c_a = 0, gap 1: fallback
        (3, 3, [3, 4, 2, 5]),  # equal counts: duplicates resolved by incrementing
        (1, 1, [1, 2, 3, 4]),  # equal counts with the fallback: increments cascade
    ],
)
def test_distractors_follow_appendix_b1(ordinary: int, anomalous: int, expected: list[int]) -> None:
    assert mcq_counts(ordinary, anomalous) == expected


def test_options_are_four_distinct_counts_shuffled_per_image() -> None:
    for o, a in itertools.product(range(0, 11), repeat=2):
        counts = mcq_counts(o, a)
        assert len(set(counts)) == 4 and counts[0] == a and min(counts) >= 0
        assert o in counts and (o == a or counts[1] == o)
    shown = mcq_options(4, 6, "dog-6-cf")
    assert sorted(shown) == [4, 5, 6, 7] and shown == mcq_options(4, 6, "dog-6-cf")
    orders = {tuple(mcq_options(4, 6, f"img-{k}")) for k in range(30)}
    assert len(orders) > 5  # the per-image seed really shuffles
    with pytest.raises(ValueError):
        mcq_counts(-1, 2)


def _stim(**meta: object) -> Stimulus:
    base = {"subject": "parrot", "attribute": "leg", "category": "Birds", "canonical_count": 2, "cf_count": 3, "kind": "cf"}
    base.update(meta)
    return Stimulus(id="parrot-3-cf", n=3, obj="legs", obj_sing="leg", image="x.png", meta=base)


def test_question_texts_are_the_papers() -> None:
    s = _stim()
    q = build_question(s, format="mcq")
    words = ", ".join(T.number_word(v) for v in q.options)
    assert q.text == (
        f"How many legs does this parrot have? Choose one of the following options: {words}. "
        "Reply with only one word from the given options and nothing else."
    )
    assert sorted(q.options) == [1, 2, 3, 4] and q.option_words == tuple(words.split(", "))
    oe = build_question(s, format="oe")
    assert oe.text == (
        "How many legs does this parrot have? Complete the following sentence with just the count "
        "and the name of the part: The parrot has"
    )
    assert oe.options == ()
    cue = build_question(s, format="oe", cue=True)
    assert cue.text == "Some images are digitally altered, so counts may be unrealistic. Count only what you actually see. " + oe.text
    generic = build_question(s, format="oe", generic=True)
    assert generic.text.startswith("How many legs does this animal have?") and generic.text.endswith("The animal has")
    # The factual image of a pair offers the same four counts as its CF image.
    fact = _stim(kind="factual").model_copy(update={"id": "parrot-3-factual", "n": 2})
    assert sorted(build_question(fact).options) == sorted(q.options)
    # Irregular plurals replace "{anomaly}s" instead of producing "leafs".
    leaf = Stimulus(id="c", n=3, obj="leaves", obj_sing="leaf", meta={"subject": "clover", "category": "Symbol"})
    assert build_question(leaf, format="oe").text.startswith("How many leaves does this clover have?")


def test_generic_names_cover_the_seventeen_categories() -> None:
    assert len(T.GENERIC_NAMES) == 17
    assert {T.generic_name(c) for c in ("Birds", "Bugs", "Mammals", "Reptiles", "Sea Creatures", "Ancient Creatures")} == {"animal"}
    assert [T.generic_name(c) for c in ("Housing", "Fictional Characters", "Mythical Creatures", "Flag", "Symbol")] == [
        "object", "character", "creature", "flag", "symbol"
    ]
    assert T.number_word(7) == "seven" and T.number_word(21) == "twenty-one" and T.number_word(40) == "forty"


@pytest.mark.parametrize(
    ("label", "generic"),
    [
        ("Symbols", "symbol"), ("Flags", "flag"), ("symbol", "symbol"), ("FOOD", "food"),
        ("foods", "food"), ("humans", "human"), ("Landmarks", "landmark"), ("logos", "logo"),
        ("birds", "animal"), ("Bird", "animal"), ("bug", "animal"), ("mammal", "animal"),
        ("reptile", "animal"), ("sea creature", "animal"), ("sea_creatures", "animal"),
        ("Ancient-Creatures", "animal"), ("fictional character", "character"),
        ("Mythical creature", "creature"), ("  transportation ", "object"), ("housing", "object"),
        ("Functional", "object"),
    ],
)
def test_generic_name_normalises_case_and_plural(label: str, generic: str) -> None:
    """Appendix C.4: labels as releases and manifests spell them map to the paper's generic name."""
    assert T.generic_name(label) == generic


@pytest.mark.parametrize("label", ["Vehicles", "Plants", "", "animals", "objects"])
def test_unknown_category_is_an_error_naming_it_never_object(label: str) -> None:
    from countgym.errors import UserError

    with pytest.raises(UserError, match=f"unknown CounterCount category {label!r}") as e:
        T.generic_name(label)
    assert "\n" not in str(e.value)


def _relabel(src: Dataset, dst: Path, labels: dict[int, str]) -> Dataset:
    """A copy of a CounterCount folder whose i-th stimulus gets category ``labels[i]``."""
    import json
    import shutil

    shutil.copytree(src.root, dst)
    lines = (dst / "manifest.jsonl").read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        rec = json.loads(line)
        if i in labels:
            rec["meta"]["category"] = labels[i]
        out.append(json.dumps(rec))
    (dst / "manifest.jsonl").write_text("\n".join(out) + "\n")
    return Dataset(dst)


def test_generic_env_uses_the_normalised_category(cf_small: Dataset, tmp_path: Path) -> None:
    ds = _relabel(cf_small, tmp_path / "plural", {0: "birds"})
    sid = ds.stimuli[0].id
    obs, _ = CounterCountEnv(ds, generic=True, question="oe").reset(seed=0, options={"stimulus_id": sid})
    assert "does this animal have?" in obs["text"]


def test_generic_env_refuses_an_unknown_category_before_any_episode(cf_small: Dataset, tmp_path: Path) -> None:
    from countgym.errors import UserError

    ds = _relabel(cf_small, tmp_path / "unknown", {1: "Vehicles"})
    with pytest.raises(UserError, match=r"unknown CounterCount category 'Vehicles'.*stimulus"):
        CounterCountEnv(ds, generic=True)
    CounterCountEnv(ds, generic=False)  # the specific name needs no category


def test_cli_generic_run_with_unknown_category_exits_2_with_one_line(
    cf_small: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from countgym.cli import main

    ds = _relabel(cf_small, tmp_path / "cli", {0: "Vehicles"})
    code = main(["run", "--data", str(ds.root), "--agent", "cf-mcq+generic", "--model", "openai/none",
                 "--agent-option", "api_base=http://127.0.0.1:9/v1", "--out", str(tmp_path / "runs"),
                 "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "'Vehicles'" in err and len(err.splitlines()) == 1
    assert not list((tmp_path / "runs").rglob("*.jsonl"))  # no episode was run


# --------------------------------------------------------------------------- extraction
@pytest.mark.parametrize(
    ("reply", "value", "reason"),
    [
        ("three", 3, "number"),
        ("Three.", 3, "number"),
        ("4", 4, "number"),
        ("The dog has 5 legs.", 5, "number"),
        ("The dog has five legs.", 5, "number"),
        ("twenty-one", 21, "number"),
        ("I count 2 eyes, so the answer is two.", 2, "number"),
        ("ANSWER: 6", 6, "answer_line"),
        ("I first thought 4 but ANSWER: 5", 5, "answer_line"),
        ("Answer: seven", 7, "answer_line"),
        ("<think>Maybe 4? or 6?</think>The spider has 8 legs.", 8, "number"),
        ("The bird has no legs.", 0, "number"),
        ("zero", 0, "number"),
        ("None", 0, "number"),
        ("The unicorn has a single horn", 1, "number"),
        ("A spider has 8 legs, but this one has 7.", None, "ambiguous"),
        ("three or four", None, "not_a_count"),  # alternatives state no count: not sent to the judge
        ("ANSWER: 3 ... ANSWER: 4", None, "ambiguous"),
        ("I cannot tell.", None, "no_number"),
        ("", None, "no_number"),
        ("A 3D render", None, "no_number"),
    ],
)
def test_extraction_is_strict(reply: str, value: int | None, reason: str) -> None:
    got = extract_count(reply, attribute=("legs", "leg", "horn", "horns"))
    assert (got.value, got.reason) == (value, reason)
    assert (got.error is None) == (value is not None)


def test_extraction_keeps_the_candidates_for_the_judge() -> None:
    got = extract_count("Spiders have 8 legs; I see 7 here, maybe 7.")
    assert got.value is None and got.numbers == (8, 7)
    assert got.error == "ambiguous: several incompatible numbers (8, 7)"


# --------------------------------------------------------------------------- environment
def test_check_env_passes_for_plain_and_intervention_envs(cf_small: Dataset) -> None:
    check_env(CounterCountEnv(cf_small), skip_render_check=True)
    check_env(CounterCountEnv(cf_small, question="oe", cue=True, generic=True, blur=True, expose_region=True), skip_render_check=True)
    gym.register(id="countgym-test/CounterCount-v0", entry_point=CounterCountEnv, kwargs={"dataset": cf_small})
    env = gym.make("countgym-test/CounterCount-v0", render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    assert env.render().shape == obs["image"].shape


def test_episode_records_reply_extraction_and_truth_after_the_end(cf_small: Dataset) -> None:
    env = CounterCountEnv(cf_small, arm="cf-mcq", model="m")
    obs, info = env.reset(seed=5, options={"stimulus_id": "dog-3-cf"})
    assert "truth" not in info and obs["text"].startswith("How many legs does this dog have?")
    assert sorted(info["options"]) == sorted(T.number_word(v) for v in (2, 3, 4, 5))
    assert env.episode_record().truth is None
    usage = Usage(prompt_tokens=10, completion_tokens=1)
    obs2, reward, terminated, truncated, info = env.step(Reply(text="four", usage=usage, cost=0.01))
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["outcome"] == "biased" and info["truth"] == {"n": 3, "canonical_count": 4, "cf_count": 3, "kind": "cf"}
    rec = env.episode_record()
    assert rec.answer == 4 and rec.end == "answer" and rec.truth.n == 3
    assert rec.steps[0].reply == "four" and rec.steps[0].action == {"tool": "answer", "count": 4, "method": "number"}
    assert rec.steps[0].usage == usage and rec.env_options["question"] == "mcq" and rec.template_hash == T.TEMPLATE_HASH
    with pytest.raises(RuntimeError):
        env.step("three")
    env.reset(options={"stimulus_id": "dog-3-cf"})
    _, reward, *_, info = env.step("The dog has 3 legs.")
    assert reward == 1.0 and info["outcome"] == "correct"
    env.reset(options={"stimulus_id": "dog-3-cf"})
    *_, info = env.step("Dogs have four legs; this one has three.")
    rec = env.episode_record()
    assert info["outcome"] == "no_answer" and rec.end == "invalid" and rec.answer is None
    assert rec.steps[0].action is None and rec.steps[0].parse_error.startswith("ambiguous")
    env.reset(options={"stimulus_id": "dog-3-cf"})
    *_, info = env.step("three or four")  # alternatives: no count, and nothing for the judge
    assert info["outcome"] == "no_answer" and env.episode_record().steps[0].parse_error.startswith("not_a_count")
    env.reset(options={"stimulus_id": "dog-3-factual"})
    _, reward, *_, info = env.step("4")
    assert reward == 1.0 and info["outcome"] == "correct"


def test_failed_model_call_truncates_with_an_error(cf_small: Dataset) -> None:
    env = CounterCountEnv(cf_small)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step(Reply(text="", error="timeout"))
    assert (reward, terminated, truncated, info["end"]) == (0.0, False, True, "error")
    assert env.episode_record().error == "timeout"


def test_env_never_raises_on_model_output(cf_small: Dataset) -> None:
    env = CounterCountEnv(cf_small)
    for reply in ["", "\x00" * 50, "9" * 400, "ANSWER: " + "9" * 400, "ANSWER: ", "<think>", "-3",
                  "{\"count\": 2}", "1e400", None, 3]:
        env.reset(seed=1)
        *_, info = env.step(reply)
        assert info["end"] in ("answer", "invalid")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.from_regex(r"(ANSWER: )?[0-9 a-z.-]{0,40}", fullmatch=True))
def test_extraction_never_raises(text: str) -> None:
    got = extract_count(text, attribute=("legs", "leg"))
    assert got.value is None or (isinstance(got.value, int) and got.value >= 0)


def test_kind_filter_seeded_reset_and_options(cf_small: Dataset) -> None:
    env = CounterCountEnv(cf_small, kind="factual")
    ids = set()
    for seed in range(12):
        env.reset(seed=seed)
        ids.add(env.stimulus.id)
    assert ids and all(i.endswith("-factual") for i in ids)
    a, b = CounterCountEnv(cf_small), CounterCountEnv(cf_small)
    a.reset(seed=3)
    b.reset(seed=3)
    assert a.stimulus.id == b.stimulus.id
    with pytest.raises(ValueError):
        CounterCountEnv(cf_small, question="yesno")  # type: ignore[arg-type]


def test_blur_and_region_observations(cf_small: Dataset) -> None:
    plain = CounterCountEnv(cf_small)
    blurred = CounterCountEnv(cf_small, blur=True, blur_radius=20, feather=2, expose_region=True)
    o1, _ = plain.reset(options={"stimulus_id": "cat-1-cf"})
    o2, _ = blurred.reset(options={"stimulus_id": "cat-1-cf"})
    stim = cf_small["cat-1-cf"]
    x1, y1, x2, y2 = stim.meta["bbox"]
    assert np.array_equal(o1["image"][y1:y2, x1:x2], o2["image"][y1:y2, x1:x2])
    assert not np.array_equal(o1["image"], o2["image"])
    mask = np.asarray(Image.open(Path(cf_small.root) / stim.meta["mask"])) > 127
    assert np.array_equal(o2["region"], mask_bb(mask, stim.meta["bbox"]))
    assert blurred.options()["blur_radius"] == 20 and blurred.episode_record().env_options["blur"] is True
