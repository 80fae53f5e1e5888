"""CounterCount metrics on hand-computed cases, the cached judge, figures, and the CF arms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from countgym.agents.cf_arm import CFArm, CFPolicy, is_cf_arm, make_cf_policy, parse_cf_arm
from countgym.analysis.cf import (
    cf_frame,
    cf_scores,
    intervention_label,
    judge_ambiguous,
    paired_deltas,
    plot_by_category,
    scores_by,
    write_cf_report,
)
from countgym.envs.actions import Reply
from countgym.envs.cf_env import CounterCountEnv
from countgym.errors import UserError
from countgym.logs import EpisodeRecord, LogWriter
from countgym.scenes.counterfactual import make_countercount
from countgym.stimulus import Dataset

# Pairs of the first four design pairs: dog 4->3 legs, cat 2->1 ears, bird 2->1 legs, spider 8->6 legs.
BASELINE = {
    "dog-3-factual": "4", "dog-3-cf": "4",            # correct, biased
    "cat-1-factual": "2", "cat-1-cf": "1",            # correct, correct
    "bird-1-factual": "3", "bird-1-cf": "two",        # wrong, biased
    "spider-6-factual": "8", "spider-6-cf": "maybe 7, maybe 9",  # correct, no answer
}
CUE = {"dog-3-cf": "3", "cat-1-cf": "1", "bird-1-cf": "2", "spider-6-cf": "6"}


@pytest.fixture(scope="module")
def cf4(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return Dataset(make_countercount(tmp_path_factory.mktemp("cfa"), limit=4, progress=False))


def _run(ds: Dataset, replies: dict[str, str], **env_options: object) -> list[EpisodeRecord]:
    env = CounterCountEnv(ds, arm="cf-mcq", model="m", **env_options)  # type: ignore[arg-type]
    out = []
    for sid, text in replies.items():
        env.reset(seed=0, options={"stimulus_id": sid})
        env.step(text)
        out.append(env.episode_record())
    return out


@pytest.fixture(scope="module")
def records(cf4: Dataset) -> list[EpisodeRecord]:
    return _run(cf4, BASELINE) + _run(cf4, CUE, cue=True)


def test_bias_metrics_known_answer(cf4: Dataset, records: list[EpisodeRecord]) -> None:
    df = cf_frame(records, cf4)
    assert list(df["outcome"][:8]) == ["correct", "biased", "correct", "correct", "other", "biased", "correct", "no_answer"]
    s = cf_scores(df).set_index("intervention")
    base, cue = s.loc["baseline"], s.loc["cue"]
    assert (base.n_factual, base.n_cf) == (4, 4)
    assert base.factual_accuracy == pytest.approx(0.75)
    assert (base.cf_accuracy, base.bias_rate, base.other_error_rate, base.no_answer_rate) == pytest.approx((0.25, 0.5, 0.25, 0.25))
    assert base.cf_accuracy + base.bias_rate + base.other_error_rate == pytest.approx(1.0)
    assert (cue.cf_accuracy, cue.bias_rate) == pytest.approx((0.75, 0.25))
    assert np.isnan(cue.factual_accuracy) and cue.n_factual == 0
    for col in ("cf_accuracy", "bias_rate", "factual_accuracy"):  # 4 items: fewer than MIN_CI_ITEMS
        assert np.isnan(base[f"{col}_low"]) and np.isnan(base[f"{col}_high"])
    assert base.ci_note.startswith("factual_accuracy: 4 factual items, fewer than 5; cf_accuracy, bias_rate")
    assert cf_scores(df).equals(cf_scores(df))  # seeded
    cats = scores_by(df[df.intervention == "baseline"], "category").set_index("category")
    assert cats.loc["Bugs", "n_cf"] == 1 and cats.loc["Mammals", "cf_accuracy"] == pytest.approx(0.5)
    edits = scores_by(df, "edit")
    assert set(edits["edit"]) == {"removal"}


def test_paired_deltas_known_answer(cf4: Dataset, records: list[EpisodeRecord]) -> None:
    df = cf_frame(records, cf4)
    d = paired_deltas(df).iloc[0]
    assert (d.level, d.n_pairs) == ("cue", 4)
    assert (d.accuracy_delta, d.bias_rate_delta) == pytest.approx((0.5, -0.25))
    assert np.isnan(d.accuracy_delta_low) and "4 pairs, fewer than 5" in d.ci_note
    drop = paired_deltas(df[df.intervention == "baseline"], factor="kind", baseline="factual",
                         key=("pair_id", "repeat"), by=("model",), kind=None).iloc[0]
    assert drop.n_pairs == 4 and drop.accuracy_delta == pytest.approx(-0.5)


def test_errored_episodes_are_counted_not_scored(cf4: Dataset, records: list[EpisodeRecord]) -> None:
    """A failed model call is no wrong answer: it is left out of every rate and counted."""
    df = cf_frame(records, cf4)
    failed = df.index[(df["intervention"] == "baseline") & (df["stimulus_id"] == "spider-6-cf")]
    df.loc[failed, "end"] = "error"
    base = cf_scores(df).set_index("intervention").loc["baseline"]
    assert (base.errors, base.n_cf) == (1, 3)
    assert (base.cf_accuracy, base.bias_rate, base.no_answer_rate) == pytest.approx((1 / 3, 2 / 3, 0.0))
    assert paired_deltas(df).iloc[0].n_pairs == 3


def test_bootstrap_ci_of_a_constant_is_not_estimable(cf4: Dataset) -> None:
    """Every outcome alike: the bootstrap cannot vary, so no [1.00, 1.00] interval is claimed."""
    df = cf_frame(_run(cf4, {"dog-3-cf": "3", "cat-1-cf": "1"}), cf4)
    df = pd.concat([df] * 3, ignore_index=True)  # 6 items, all correct
    s = cf_scores(df).iloc[0]
    assert s.cf_accuracy == 1.0 and np.isnan(s.cf_accuracy_low) and np.isnan(s.cf_accuracy_high)
    assert "cf_accuracy, bias_rate, other_error_rate, no_answer_rate: no resample of the 6 CF items changes" in s.ci_note


class _Judge:
    model = "judge-model"

    def __init__(self, text: str = "7", error: str | None = None) -> None:
        self.text, self.error, self.calls, self.prompts = text, error, 0, []

    def complete(self, messages: list[dict]) -> Reply:
        self.calls += 1
        self.prompts.append(messages[0]["content"][0]["text"])
        return Reply(text=self.text, error=self.error)


def test_judge_resolves_several_numbers_and_caches(tmp_path: Path, cf4: Dataset, records: list[EpisodeRecord]) -> None:
    df = cf_frame(records, cf4)
    failing = _Judge(error="rate limited")
    same = judge_ambiguous(df, failing, dataset=cf4, cache_dir=tmp_path / "j")
    assert failing.calls == 1 and same["answer"].isna().sum() == 1  # errors are not cached
    judge = _Judge("7")
    out = judge_ambiguous(df, judge, dataset=cf4, cache_dir=tmp_path / "j")
    assert judge.calls == 1
    prompt = judge.prompts[0]
    assert prompt.startswith("Question: How many legs does this spider have? Choose one of the following options:")
    assert "Model response: 'maybe 7, maybe 9' The correct answer to this question is 6." in prompt
    assert prompt.endswith("Reply with only a single digit, nothing else.")
    row = out[out.stimulus_id == "spider-6-cf"].iloc[0]
    assert (row.answer, row.method, row.outcome) == (7, "judge", "other")
    again = _Judge("6")
    cached = judge_ambiguous(df, again, dataset=cf4, cache_dir=tmp_path / "j")
    assert again.calls == 0 and cached[cached.stimulus_id == "spider-6-cf"].iloc[0].answer == 7


def test_frame_from_log_files_and_report(tmp_path: Path, cf4: Dataset, records: list[EpisodeRecord]) -> None:
    log = tmp_path / "runs" / "cell.jsonl"
    w = LogWriter(log)
    for r in records:
        w.append(r)
    df = cf_frame([tmp_path / "runs"], cf4)
    assert len(df) == len(records) and set(df.intervention) == {"baseline", "cue"}
    assert intervention_label({"blur": True, "thinking": True, "cue": False}) == "blur+thinking"
    fig = plot_by_category(df)
    assert fig.axes and len(fig.axes[0].patches) > 0
    paths = write_cf_report(df, tmp_path / "report")
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    assert {p.name for p in paths} >= {"cf_scores.csv", "cf_deltas.csv", "cf_category.png", "cf_intervention.png"}
    # The audit's call: the same tables, and of the figures only those it does not redraw per model.
    lean = write_cf_report(df, tmp_path / "lean", pooled_figures=False)
    assert [p.name for p in lean if p.suffix == ".csv"] == [p.name for p in paths if p.suffix == ".csv"]
    assert not {p.name for p in lean} & {"cf_category.png", "cf_intervention.png", "cf_count.png"}
    assert {p.name for p in (tmp_path / "lean" / "figures").glob("*.png")} <= {"cf_blur_sweep.png"}


# --------------------------------------------------------------------------- arms
def test_cf_arm_names_and_options() -> None:
    arm = parse_cf_arm("cf-oe+cue+blur")
    assert arm == CFArm("oe", frozenset({"cue", "blur"})) and arm.name == "cf-oe+blur+cue"
    opts = arm.env_options()
    assert (opts["question"], opts["cue"], opts["blur"], opts["generic"], opts["thinking"]) == ("oe", True, True, False, False)
    assert opts["blur_radius"] == 48.0 and opts["feather"] == 4.0
    assert parse_cf_arm("cf-mcq").backend_options("openai/x") == {"reasoning": "off", "temperature": 0.0, "max_tokens": 128}
    assert parse_cf_arm("cf-mcq+think").backend_options("hf:/m") == {"thinking": True, "max_new_tokens": 16384, "decoding": "sample"}
    assert parse_cf_arm("cf-mcq+attn").env_options()["expose_region"] is True
    assert is_cf_arm("cf-mcq+generic") and not is_cf_arm("direct")
    for bad in ("cf-yesno", "cf-mcq+loud", "tag"):
        with pytest.raises(UserError):
            parse_cf_arm(bad)


def test_cf_policy_sends_image_and_question(cf4: Dataset) -> None:
    seen: list[list[dict]] = []

    class Model:
        model = "fake"

        def complete(self, messages: list[dict]) -> Reply:
            seen.append(messages)
            return Reply(text="three")

        def complete_batch(self, batch: list[list[dict]]) -> list[Reply]:
            return [self.complete(m) for m in batch]

    policy = make_cf_policy("cf-mcq", Model())
    assert isinstance(policy, CFPolicy)
    env = CounterCountEnv(cf4, expose_region=True)
    obs, _ = env.reset(options={"stimulus_id": "dog-3-cf"})
    policy.reset(obs, None)
    _, reward, *_ = env.step(policy.act(obs))
    parts = seen[0][0]["content"]
    assert [p["type"] for p in parts] == ["image", "text"]  # no region for a plain backend
    assert parts[1]["text"] == obs["text"] and reward == 1.0
    assert [r.text for r in policy.act_batch([obs, obs])] == ["three", "three"]


def _scores_by_copying_groups(frame: pd.DataFrame, by: list[str], seed: int) -> pd.DataFrame:
    """``cf_scores`` as a plain pandas loop over group copies: the reference the array version
    must equal (keys, group order, errors, judge counts, seeds, intervals)."""
    from countgym.analysis.bootstrap import CI_NOTE, join_notes
    from countgym.analysis.cf import _natural_key, _rate_ci, _seed, judge_counts

    rows = []
    for keys, g in frame.groupby(by, dropna=False, sort=True):
        keys = keys if isinstance(keys, tuple) else (keys,)
        row: dict[str, object] = dict(zip(by, keys, strict=True))
        errored = (g["end"] == "error").to_numpy(dtype=bool)
        g = g[~errored]
        row["errors"] = int(errored.sum())
        fact, cf = g[g["kind"] == "factual"], g[g["kind"] == "cf"]
        row["n_factual"], row["n_cf"] = len(fact), len(cf)
        notes = {}
        for name, col in (("factual_accuracy", fact["correct"]), ("cf_accuracy", cf["correct"]),
                          ("bias_rate", cf["biased"]), ("other_error_rate", cf["other_error"]),
                          ("no_answer_rate", ~cf["answered"])):
            unit = "factual items" if name == "factual_accuracy" else "CF items"
            est, lo, hi, why = _rate_ci(col.to_numpy(dtype=float), 300, 0.95, _seed(seed, name, keys), unit)
            row[name], row[f"{name}_low"], row[f"{name}_high"] = est, lo, hi
            notes[name] = why
        row.update(judge_counts(g))
        row[CI_NOTE] = join_notes(notes)
        rows.append(row)
    out = pd.DataFrame(rows)
    if "intervention" in by:
        out = out.sort_values(by, key=_natural_key, kind="stable", ignore_index=True)
    return out


@pytest.mark.parametrize("by", [["model", "format", "intervention", "category"], ["intervention"], ["category"]])
def test_cf_scores_equal_a_loop_over_group_copies(by: list[str]) -> None:
    """Groups are row positions over arrays read once; they must give exactly the numbers of
    copying each group out of the frame: NaN keys kept as a group, failed calls left out and
    counted, ambiguous replies counted for the judge, per-group seeds."""
    rng = np.random.default_rng(3)
    n = 400
    kinds = rng.choice(["factual", "cf"], n)
    answered = rng.random(n) < 0.9
    correct = answered & (rng.random(n) < 0.5)
    biased = answered & ~correct & (kinds == "cf") & (rng.random(n) < 0.6)
    frame = pd.DataFrame({
        "model": rng.choice(["b", "a"], n),
        "format": rng.choice(["mcq", "oe"], n),
        "intervention": rng.choice(["baseline", "blur(r=16,f=4)", "blur(r=8,f=4)", "cue"], n),
        "category": pd.array(rng.choice(["legs", "ears", None], n), dtype="string"),
        "kind": kinds,
        "end": rng.choice(["answer", "answer", "answer", "error"], n),
        "method": rng.choice(["rules", "judge", None], n),
        "parse_error": rng.choice(["ambiguous: 3 or 4", None, "no number"], n),
        "answered": answered, "correct": correct, "biased": biased, "other_error": ~correct & ~biased,
    }, index=rng.permutation(n) + 1000)  # not a range index: positions, not labels
    got = cf_scores(frame, by=by, n_resamples=300, seed=5)
    want = _scores_by_copying_groups(frame, by, seed=5)
    assert got["category" if "category" in by else "intervention"].isna().any() == ("category" in by)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
