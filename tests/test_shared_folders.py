"""Several paper configs run into one shared folder audit right: CounterCount baseline + blur
sweep, Table 7 (R80) with transformed copies and video in the folder, one model name at two
endpoints, contrast labels across datasets, and printed tables whose names are cut."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from countgym.analysis.cf import (
    blur_sweep_scores,
    cf_frame,
    cf_scores,
    intervention_label,
    paired_deltas,
)
from countgym.analysis.contrasts import contrast_labels
from countgym.analysis.glance import WIDTH, Glance, render
from countgym.analysis.naming import distinct_cuts, endpoint_identity, middle_cut, model_labels
from countgym.analysis.pipeline import compute_tables
from countgym.analysis.task_sections import write_task_sections
from countgym.envs.cf_env import CounterCountEnv
from countgym.logs import ArmSpec, EpisodeRecord, Truth
from countgym.scenes.counterfactual import make_countercount
from countgym.stimulus import Dataset, Stimulus, write_manifest

# --- CounterCount: baseline + blur sweep in one folder ----------------------------------------

# CF items of the first four design pairs (canonical -> CF count): dog 4->3, cat 2->1, bird 2->1,
# spider 8->6.
CF_TRUE = {"dog-3-cf": "3", "cat-1-cf": "1", "bird-1-cf": "1", "spider-6-cf": "6"}
CF_CANON = {"dog-3-cf": "4", "cat-1-cf": "2", "bird-1-cf": "2", "spider-6-cf": "8"}


@pytest.fixture(scope="module")
def cf4(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    root = make_countercount(tmp_path_factory.mktemp("cfs"), limit=4, progress=False)
    return Dataset(root, name=str(root))  # episodes name the folder, as a run does


def _cf_run(ds: Dataset, arm: str, question: str, correct: int, model: str = "m",
            **env_options: object) -> list[EpisodeRecord]:
    """Episodes on the four CF items: the first ``correct`` answered right, the rest with the
    canonical count (biased)."""
    env = CounterCountEnv(ds, arm=arm, model=model, question=question, **env_options)  # type: ignore[arg-type]
    out = []
    for i, sid in enumerate(CF_TRUE):
        env.reset(seed=0, options={"stimulus_id": sid})
        env.step(CF_TRUE[sid] if i < correct else CF_CANON[sid])
        out.append(env.episode_record())
    return out


# (radius, feather) -> CF items answered right of 4, per format (the rest biased)
SWEEP = {(8.0, 4.0): (4, 2), (48.0, 4.0): (0, 0), (48.0, 16.0): (2, 2)}


@pytest.fixture(scope="module")
def shared_cf(cf4: Dataset) -> list[EpisodeRecord]:
    recs = []
    for q in ("mcq", "oe"):
        recs += _cf_run(cf4, f"cf-{q}", q, 1)  # the baseline config
        for (r, f), right in SWEEP.items():  # the blur sweep config
            recs += _cf_run(cf4, f"cf-{q}+blur", q, right[q == "oe"], blur=True, blur_radius=r, feather=f)
    return recs


@pytest.mark.slow  # the whole CounterCount report: 11 figure pages drawn (about 5 s of CPU)
def test_baseline_and_blur_sweep_in_one_folder_audit(shared_cf: list[EpisodeRecord], tmp_path: Path) -> None:
    # Today: ValueError "intervention='blur': items are not unique by ['stimulus_id', 'repeat']".
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is dropped: every item is unique per setting
        paths, sections = write_task_sections(shared_cf, tmp_path, seed=0)
    names = {p.name for p in paths}
    assert {"cf_blur_sweep.csv", "cf_blur_sweep.png", "cf_deltas.csv"} <= names
    assert "Figure 20" in "".join(sections)
    deltas = pd.read_csv(tmp_path / "countercount" / "cf_deltas.csv")
    d = deltas.set_index(["format", "level"])
    # baseline: 1 of 4 right; blur(r=8,f=4) on MCQ: 4 of 4 -> +0.75 accuracy, -0.75 bias
    assert d.loc[("mcq", "blur(r=8,f=4)"), "accuracy_delta"] == pytest.approx(0.75)
    assert d.loc[("mcq", "blur(r=8,f=4)"), "bias_rate_delta"] == pytest.approx(-0.75)
    assert d.loc[("mcq", "blur"), "accuracy_delta"] == pytest.approx(-0.25)
    assert (d["n_pairs"] == 4).all() and len(d) == 6


def test_each_blur_setting_is_its_own_row(shared_cf: list[EpisodeRecord], cf4: Dataset) -> None:
    frame = cf_frame(shared_cf, cf4)
    s = cf_scores(frame, n_resamples=50).set_index(["format", "intervention"])
    # Today every setting pools into one "blur" row (MCQ CF accuracy (4 + 0 + 2) / 12 = 0.5).
    assert list(s.loc["mcq"].index) == ["baseline", "blur", "blur(r=8,f=4)", "blur(r=48,f=16)"]
    assert s.loc[("mcq", "blur(r=8,f=4)"), "cf_accuracy"] == pytest.approx(1.0)
    assert s.loc[("mcq", "blur"), "bias_rate"] == pytest.approx(1.0)
    assert s.loc[("oe", "blur(r=48,f=16)"), "cf_accuracy"] == pytest.approx(0.5)
    assert (s["n_cf"] == 4).all()
    # Figure 20's table: per setting, MCQ and OE and their mean (items pooled, equal counts)
    sweep = blur_sweep_scores(frame, n_resamples=50).set_index(["blur_radius", "feather", "format"])
    assert len(sweep) == 9
    assert sweep.loc[(8.0, 4.0, "mcq+oe"), "cf_accuracy"] == pytest.approx(0.75)
    assert sweep.loc[(8.0, 4.0, "oe"), "cf_accuracy"] == pytest.approx(0.5)
    assert sweep.loc[(48.0, 16.0, "mcq+oe"), "bias_rate"] == pytest.approx(0.5)
    assert sweep.loc[(48.0, 4.0, "mcq+oe"), "bias_rate"] == pytest.approx(1.0)


def test_blur_labels() -> None:
    assert intervention_label({"blur": True, "blur_radius": 48.0, "feather": 4.0}) == "blur"
    assert intervention_label({"blur": True}) == "blur"
    assert intervention_label({"blur": True, "blur_radius": 96.0, "feather": 4.0, "cue": True}) == "blur(r=96,f=4)+cue"
    assert intervention_label({"blur": False, "blur_radius": 8.0}) == "baseline"


def test_a_single_blur_setting_draws_no_sweep(cf4: Dataset) -> None:
    recs = _cf_run(cf4, "cf-mcq", "mcq", 1) + _cf_run(cf4, "cf-mcq+blur", "mcq", 2, blur=True)
    assert blur_sweep_scores(cf_frame(recs, cf4)).empty


def test_repeated_items_warn_instead_of_failing(shared_cf: list[EpisodeRecord], cf4: Dataset) -> None:
    frame = cf_frame(shared_cf, cf4)
    twice = pd.concat([frame, frame[frame["intervention"] == "blur"]], ignore_index=True)
    with pytest.warns(UserWarning, match="repeat an item"):
        d = paired_deltas(twice, n_resamples=20)
    assert (d["n_pairs"] == 4).all()


# --- Table 7 (R80): image arms only, the untransformed battery only ---------------------------

TOOLS = {"tools": ["answer"], "budget": 1, "verify": False, "prompt": "direct"}


def _battery(root: Path, suffix: str = "", transform: str | None = None) -> Dataset:
    """Two images per count n = 1..8, meta set = main (a transformed copy names its transform)."""
    stims = []
    for n in range(1, 9):
        for k in range(2):
            sid = f"d{n:02d}-{k}{suffix}"
            meta: dict[str, object] = {"set": "main"}
            if transform:
                meta |= {"transform": transform, "transform_of": f"d{n:02d}-{k}"}
            pts = [(10.0 + 10 * i, 20.0 + 5 * k) for i in range(n)]
            stims.append(Stimulus(id=sid, n=n, obj="dots", obj_sing="dot", image=f"images/{sid}.png",
                                  points=pts, meta=meta))  # fmt: skip
    write_manifest(root, stims)
    return Dataset(root)


_IDS = itertools.count()


def _rec(dataset: str, s: Stimulus, answer: int | None, *, arm: str = "direct", model: str = "m",
         options: dict | None = None, env_options: dict | None = None) -> EpisodeRecord:
    return EpisodeRecord(
        episode_id=f"e{next(_IDS)}", stimulus_id=s.id,
        dataset=dataset, arm=ArmSpec(name=arm, options=options or TOOLS), env_options=env_options or {},
        model=model, seed=0, answer=answer, end="answer", truth=Truth(n=s.n), countgym_version="t",
        template_hash="t", started_at="", finished_at="",
    )  # fmt: skip


@pytest.fixture(scope="module")
def batteries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dataset]:
    root = tmp_path_factory.mktemp("bat")
    return {
        "bat": _battery(root / "bat"),
        "bat+mirror": _battery(root / "mirror", "-mirror", "mirror"),
        "bat+rot180": _battery(root / "rot", "-rot180", "rot180"),
        "vid": _battery(root / "vid", "-v"),
    }


def test_r80_table_fits_the_untransformed_battery_and_image_arms_only(batteries: dict[str, Dataset]) -> None:
    b = batteries
    recs = [_rec("bat", s, s.n if s.n <= 5 else s.n + 1) for s in b["bat"].stimuli]  # R80 = 5
    recs += [_rec("bat+mirror", s, s.n if s.n <= 2 else 0) for s in b["bat+mirror"].stimuli]  # R80 = 2
    recs += [_rec("bat+rot180", s, s.n if s.n <= 3 else 0) for s in b["bat+rot180"].stimuli]  # R80 = 3
    # a video policy whose stimuli also say set = main (exact everywhere: R80 8, censored)
    recs += [_rec("vid", s, s.n, arm="video-p1", options={"task": "video"}, env_options={"task": "video"})
             for s in b["vid"].stimuli]  # fmt: skip
    t = compute_tables(recs, resolve=lambda name: b[name], n_resamples=50)
    r = t.counting_range.set_index(["arm", "curve"])
    # Today: one "main" row over 48 images (R80 2) and a video-p1 row.
    assert "video-p1" not in set(t.counting_range["arm"])
    assert r.loc[("direct", "main"), "n_images"] == 16 and r.loc[("direct", "main"), "r80"] == 5
    assert r.loc[("direct", "main"), "datasets"] == "bat"
    assert r.loc[("direct", "main (mirror)"), "r80"] == 2 and r.loc[("direct", "main (mirror)"), "n_images"] == 16
    assert r.loc[("direct", "main (rot180)"), "r80"] == 3
    assert len(r) == 3


def test_perturbed_runs_are_rows_of_their_own(batteries: dict[str, Dataset]) -> None:
    b = batteries
    tag = {"tools": ["tag", "answer"], "budget": 6, "verify": True, "prompt": "tools"}
    recs = [_rec("bat", s, s.n, arm="tag", options=tag) for s in b["bat"].stimuli]  # censored at 8
    recs += [_rec("bat", s, s.n if s.n <= 4 else 1, arm="tag", options=tag | {"perturb": "remove"})
             for s in b["bat"].stimuli]  # fmt: skip
    t = compute_tables(recs, resolve=lambda name: b[name], n_resamples=50)
    r = t.counting_range.set_index("arm")
    assert r.loc["tag", "r80"] == 8 and bool(r.loc["tag", "r80_censored"])
    assert r.loc["tag[perturb=remove]", "r80"] == 4 and r.loc["tag[perturb=remove]", "n_images"] == 16


# --- one model name at two endpoints ----------------------------------------------------------


def test_two_endpoints_are_two_rows_labelled_by_host(batteries: dict[str, Dataset]) -> None:
    b = batteries
    stims = b["bat"].stimuli
    recs = []
    for arm, opts in (("direct", TOOLS), ("cot", {**TOOLS, "prompt": "cot"})):
        # the same name at two servers: one always exact, one exact on 10 of 16 images
        a = {**opts, "api_base": "http://user:SECRET@10.0.0.1:8000/v1?key=abc"}
        c = {**opts, "provider": {"api_base": "https://gpu-b.example.org/v1"}}
        recs += [_rec("bat", s, s.n, arm=arm, model="openai/x", options=a) for s in stims]
        recs += [_rec("bat", s, s.n if i < 10 else 0, arm=arm, model="openai/x", options=c)
                 for i, s in enumerate(stims)]  # fmt: skip
    t = compute_tables(recs, resolve=lambda name: b[name], n_resamples=50)
    s = t.summary[t.summary["arm"] == "direct"].set_index("model")
    # Today: one row, EM = 26 / 32.
    assert sorted(s.index) == ["openai/x @10.0.0.1:8000", "openai/x @gpu-b.example.org"]
    assert s.loc["openai/x @10.0.0.1:8000", "em"] == pytest.approx(1.0)
    assert s.loc["openai/x @gpu-b.example.org", "em"] == pytest.approx(10 / 16)
    text = " ".join(t.episodes["model"].unique())
    assert "SECRET" not in text and "user" not in text and "key=" not in text and "/v1" not in text
    # contrasts pair within one endpoint: cot - direct of each server, 16 pairs each, no warning
    em = t.contrasts[t.contrasts["metric"] == "exact_match_score"]
    assert sorted(em["model"]) == sorted(s.index) and (em["n_pairs"] == 16).all()
    assert (em["difference"] == 0).all()


def test_one_endpoint_keeps_the_plain_name() -> None:
    class R:
        def __init__(self, model: str, options: dict) -> None:
            self.model, self.arm = model, ArmSpec(name="direct", options=options)

    recs = [R("a", {"api_base": "http://h:1/v1"}), R("a", {"api_base": "http://h:1/v1/"}), R("b", {}),
            R("b", {"api_base": "http://h:2"}), R("c", {"api_base": "http://h:1/v1"}),
            R("c", {"api_base": "http://h:1/v2"})]  # fmt: skip
    assert model_labels(recs) == ["a", "a", "b", "b @h:2", "c @h:1", "c @h:1#2"]
    assert endpoint_identity("http://u:p@Host:8000/v1?api_key=zzz")[1] == "host:8000"


# --- contrast labels name the dataset ---------------------------------------------------------


def test_contrast_labels_name_the_dataset(batteries: dict[str, Dataset]) -> None:
    b = batteries
    tag = {"tools": ["tag", "answer"], "budget": 6, "verify": True, "prompt": "tools"}
    recs = []
    for ds in ("bat", "bat+mirror", "bat+rot180"):
        recs += [_rec(ds, s, s.n, arm="tag", options=tag) for s in b[ds].stimuli]
        recs += [_rec(ds, s, s.n + 1, arm="direct") for s in b[ds].stimuli]
    t = compute_tables(recs, resolve=lambda name: b[name], n_resamples=20)
    em = t.contrasts[t.contrasts["metric"] == "exact_match_score"]
    labels = contrast_labels(em)
    assert len(labels) == 3 and len(set(labels)) == 3  # today: three times "tag − direct"
    assert labels == ["bat · tag − direct", "bat+mirror · tag − direct", "bat+rot180 · tag − direct"]


def test_contrasts_panels_name_their_dataset(batteries: dict[str, Dataset]) -> None:
    # The contrast figure has one panel per (dataset, model), titled with both: three datasets'
    # "tag - direct" never share a panel or a title.
    from countgym.analysis import plots

    b = batteries
    recs = []
    for ds in ("bat", "bat+mirror"):
        recs += [_rec(ds, s, s.n, arm="tag", options={"tools": ["tag", "answer"], "prompt": "tools"})
                 for s in b[ds].stimuli]  # fmt: skip
        recs += [_rec(ds, s, s.n + 1, arm="direct") for s in b[ds].stimuli]
    t = compute_tables(recs, resolve=lambda name: b[name], n_resamples=20)
    pages = plots.contrast_pages(t.contrasts)
    titles = [ax.get_title() for page in pages for ax in page.fig.axes if ax.get_yticklabels()]
    titles = [x for x in titles if x]
    assert len(titles) == 2 and len(set(titles)) == 2
    assert any(x.startswith("bat\n") for x in titles) and any("mirror" in x.split("\n")[0] for x in titles)


# --- printed tables keep different cells different ---------------------------------------------


def test_printed_table_never_shows_two_cells_as_the_same_text() -> None:
    arms = [f"tag[tools=tag+grid+answer;budget={b};verify=False;order=reverse;max_tokens=1024]"
            for b in (3, 6, 12, 24, 48, 96, 192, 384)]  # fmt: skip
    rows = [{"dataset": "dotarrays-main", "arm": a, "model": "openrouter/google/gemini-3.1-flash-lite-preview",
             "scope": "dataset", "n_episodes": 10, "errors": 0, "em": 0.5, "mae": 1.0, "r80": 5.0,
             "r80_censored": False, "n_audited": 0} for a in arms]  # fmt: skip
    text = render(Glance(pd.DataFrame(rows), {}), where="w")
    lines = text.splitlines()
    assert all(len(line) <= WIDTH for line in lines)
    cells = [line.split()[1] for line in lines[2:10]]
    assert len(cells) == 8 and len(set(cells)) == 8  # once: eight times "...ens=1024]"
    # each arm is a key, spelled out whole in the key table (as the figures do)
    keys = {p[0]: p[2] for p in (line.split(None, 2) for line in lines[10:]) if len(p) == 3 and p[1] == "arm:"}
    assert [keys[c] for c in cells] == arms


@pytest.mark.parametrize("width", [6, 10, 16, 30])
def test_distinct_cuts_are_distinct_and_fit(width: int) -> None:
    rng = np.random.default_rng(width)
    values = ["".join(rng.choice(list("ab;=[]"), size=int(rng.integers(1, 60)))) for _ in range(200)]
    cut = distinct_cuts(values, width)
    assert all(len(c) <= width for c in cut)
    pairs = dict(zip(values, cut, strict=True))
    assert len(set(pairs.values())) == len(pairs)  # one text per distinct value
    assert all(c == v for v, c in pairs.items() if len(v) <= width and not c.endswith(tuple("~0123456789")))


def test_middle_cut_keeps_both_ends() -> None:
    assert middle_cut("abcdefghij", 5) == "ab…ij" and middle_cut("abc", 5) == "abc"
