"""The report at study scale: faceted figures (at most 12 series per panel, short keys for long
labels, no matplotlib layout warnings), the paper map, the SIMULATED marking, and the outputs the
audit adds (reasoning tokens, Finger Tables 15 and 21, CounterCount Figure 4a, CountVideoBench
Figure 17).

Study-scale inputs are hand-made tables and records (many datasets, models and arms with long
labels), so every check runs in seconds.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from PIL import Image

from countgym.agents.arms import ARMS
from countgym.analysis import facets, paper_map, plots
from countgym.analysis.finger_tables import (
    fsc_bins_table,
    reasoning_tokens_table,
    thinking_off_table,
)
from countgym.logs import ArmSpec, EpisodeRecord, StepRecord, Truth, Usage
from countgym.stimulus import Dataset

LONG = "tests.plugins.any_task_policy:AnswerSeven"
DATASETS = ["dotarrays-main", "/data/fsc147"]
MODELS = [f"openai/simulated-model-{i}" for i in range(3)]
ARM_LABELS = ["direct", "cot", "list", "tag", "tag+crop", "full", "tiles", "tag-1", "tag[budget=3]",
              "tag[budget=12]", "tag[verify=False]", "tag[numbered=False]", "tag[tools=tag+grid+answer]",
              "direct[thinking=False]", LONG]  # fmt: skip


def _summary() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for ds in DATASETS:
        for m in MODELS:
            for a in ARM_LABELS:
                em = float(rng.uniform(0.1, 0.9))
                audited = a.startswith("tag") or a in ("full", "list")
                rows.append({
                    "dataset": ds, "model": m, "arm": a, "scope": "dataset", "n_episodes": 20, "em": em,
                    "em_ci_low": em - 0.1, "em_ci_high": em + 0.1, "r80": 7.0, "r80_ci_low": 5.0,
                    "r80_ci_high": 10.0, "r80_censored": False, "n_audited": 20 if audited else 0,
                    "pointing_error": float(rng.uniform(1, 40)) if audited else np.nan,
                    **{f"{k}_per100{sfx}": float(rng.uniform(0, 30)) for k in ("on_target", "duplicate", "phantom", "omission")
                       for sfx in ("", "_t075", "_t150")},
                })  # fmt: skip
    return pd.DataFrame(rows)


def _contrasts() -> pd.DataFrame:
    rows = []
    for ds in DATASETS:
        for m in MODELS:
            for a in ARM_LABELS[1:]:
                rows.append({"dataset": ds, "model": m, "arm_a": "direct", "arm_b": a, "metric": "exact_match_score",
                             "n_pairs": 20, "n_images": 20, "value_a": 0.5, "value_b": 0.6, "difference": 0.1,
                             "ci_low": -0.05, "ci_high": 0.25, "ci_solid": False})  # fmt: skip
    return pd.DataFrame(rows)


def _curve() -> pd.DataFrame:
    rows = []
    for ds in DATASETS:
        for m in MODELS:
            for a in ARM_LABELS:
                for n in (1, 5, 10, 20, 40, 60):
                    rows.append({"dataset": ds, "model": m, "arm": a, "n_true": n,
                                 "exact_match_score": 1 - n / 80, "isotonic_fit": 1 - n / 80})  # fmt: skip
    return pd.DataFrame(rows)


def _series(ax: Axes) -> int:
    """Series of one panel: legend entries, else labelled y ticks (forest and bar rows)."""
    leg = ax.get_legend()
    if leg is not None:
        return len(leg.get_texts())
    return len([t for t in ax.get_yticklabels() if t.get_text()])


def _check_pages(pages: list[plots.FigurePage]) -> None:
    assert pages
    for page in pages:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # constrained-layout and tight-layout warnings fail
            plots.figure_png(page.fig)
        axes = [ax for ax in page.fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
        assert len([a for a in axes if a.get_title() or a.get_ylabel()]) <= facets.MAX_PANELS * 4
        for ax in axes:
            assert _series(ax) <= facets.MAX_SERIES, (ax.get_title(), _series(ax))
            lines = [ln for ln in ax.get_lines() if ln.get_label() and not ln.get_label().startswith("_")]
            assert len(lines) <= facets.MAX_SERIES
            for t in ax.get_yticklabels() + ([*ax.get_legend().get_texts()] if ax.get_legend() else []):
                assert len(t.get_text()) <= max(facets.KEY_AT, 30), t.get_text()  # long labels became keys
        for key, label in page.keys:
            assert re.fullmatch(r"[A-Z]\d+", key) and len(label) > facets.KEY_AT


@pytest.mark.slow  # draws every figure page of a study (about 20 s of CPU)
def test_image_figures_are_faceted_at_study_scale() -> None:
    summary, contrasts, curve = _summary(), _contrasts(), _curve()
    arm_pages = plots.arm_comparison_pages(summary)
    for pages in (plots.accuracy_vs_n_pages(curve, summary), arm_pages,
                  plots.contrast_pages(contrasts), plots.capacity_pages(summary),
                  plots.tag_gain_pages(summary, contrasts), plots.tau_sensitivity_pages(summary)):  # fmt: skip
        _check_pages(pages)
    # 2 datasets x 3 models x 15 arms: every (dataset, model) gets panels, none pooled.
    titles = [ax.get_title() for p in arm_pages for ax in p.fig.axes if ax.get_visible()]
    assert len(titles) == 2 * 3 * 2  # 15 arms -> two panels of at most 12
    assert {tuple(t.split(" (")[0].split("\n")) for t in titles} == {(d.split("/")[-1], m) for d in DATASETS for m in MODELS}
    keys = dict((label, key) for p in arm_pages for key, label in p.keys)
    assert LONG in keys  # the plug-in's long label is drawn as a key


def test_tag_gain_is_tag_minus_direct_against_pointing_error() -> None:
    summary, contrasts = _summary(), _contrasts()
    t = plots.tag_gain_table(summary, contrasts)
    assert set(t["arm"].str.split("[").str[0]) == {"tag"}
    row = t[(t["dataset"] == "dotarrays-main") & (t["model"] == MODELS[0]) & (t["arm"] == "tag")].iloc[0]
    pe = summary[(summary["dataset"] == "dotarrays-main") & (summary["model"] == MODELS[0]) & (summary["arm"] == "tag")]
    assert row["pointing_error"] == pytest.approx(float(pe["pointing_error"].iloc[0]))
    assert row["gain"] == pytest.approx(0.1)


# --- CounterCount and CountVideoBench figures ---------------------------------------------------


def _cf_frame(models: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for m in range(models):
        for fmt in ("mcq", "oe"):
            for iv in ("baseline", "cue"):
                for k in range(12):
                    kind = "cf" if k % 2 else "factual"
                    correct = bool(rng.random() < (0.9 if kind == "factual" else 0.3 + 0.03 * m))
                    biased = kind == "cf" and not correct and bool(rng.random() < 0.7)
                    rows.append({"episode_id": f"{m}-{fmt}-{iv}-{k}", "stimulus_id": f"s{k}", "model": f"openai/model-{m}",
                                 "format": fmt, "intervention": iv, "repeat": 0, "kind": kind, "pair_id": f"p{k // 2}",
                                 "category": f"category {k % 5}", "cf_bin": str(k % 8) if k % 8 < 7 else "7+",
                                 "edit": "removal" if k % 3 else "addition", "answered": True, "correct": correct,
                                 "biased": biased, "other_error": not correct and not biased, "end": "answer"})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.slow  # bootstraps and draws every CounterCount figure of seven models
def test_countercount_figures_facet_models_formats_and_interventions() -> None:
    from countgym.analysis import cf_figures

    frame = _cf_frame()
    pages = cf_figures.cross_model_pages(frame, n_resamples=200)
    assert len(pages) == 2 * 2  # one figure per format and intervention
    _check_pages_cf(pages)
    for page in pages:
        titles = [ax.get_title() for ax in page.fig.axes if ax.get_visible()]
        assert sum(t.startswith("openai/model-") for t in titles) == 7  # one panel per model
        assert "mean of 7 models" in titles
    means = cf_figures.cross_model_table(frame, n_resamples=200)
    per_model = frame[(frame["kind"] == "cf") & (frame["format"] == "mcq") & (frame["intervention"] == "baseline")]
    expected = per_model.groupby("model")["correct"].mean().mean()
    got = means[(means["format"] == "mcq") & (means["intervention"] == "baseline")].iloc[0]
    assert got["cf_accuracy"] == pytest.approx(expected) and got["n_models"] == 7
    assert got["cf_accuracy_low"] < got["cf_accuracy"] < got["cf_accuracy_high"]
    for factor in ("category", "cf_bin", "intervention"):
        pages = cf_figures.breakdown_pages(frame, factor, n_resamples=100)
        _check_pages_cf(pages)
        rows = [t.get_text() for p in pages for t in p.fig.axes[0].get_yticklabels()]
        # one row per model · format (· intervention): nothing pooled
        assert len(rows) == 7 * 2 * (1 if factor == "intervention" else 2)


def _check_pages_cf(pages: list[plots.FigurePage]) -> None:
    for page in pages:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            png = plots.figure_png(page.fig)
        assert png[:4] == b"\x89PNG"
        for ax in page.fig.axes:
            if ax.get_label() == "<colorbar>":
                continue
            assert len(ax.patches) <= facets.MAX_SERIES  # bar panels: three metrics of one model
            assert len(ax.get_images()) <= 1


def test_video_class_figure_has_a_block_per_model() -> None:
    from countgym.analysis.video_figures import class_count_pages

    rows = []
    for m in ("a / video-p1", "b / video-p1"):
        for shape in ("cube", "sphere"):
            for colour in ("red", "green", "blue", "yellow", "purple"):
                for n in (5, 10, 20):
                    rows.append({"model": m, "n_true": n, "answer": n if colour == "red" else n + 1,
                                 "shape": shape, "color": colour})  # fmt: skip
    pages = class_count_pages(pd.DataFrame(rows))
    assert len(pages) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plots.figure_png(pages[0].fig)
    blocks = [ax for ax in pages[0].fig.axes if ax.get_label() != "<colorbar>"]
    assert [ax.get_title(loc="left") for ax in blocks] == ["a / video-p1", "b / video-p1"]
    assert [t.get_text() for t in blocks[0].get_yticklabels()] == ["cube", "sphere", "red", "green", "blue",
                                                                   "yellow", "purple"]  # fmt: skip
    em = blocks[0].get_images()[0].get_array()
    assert em[2].tolist() == [100.0, 100.0, 100.0] and em[3].tolist() == [0.0, 0.0, 0.0]  # red right, green wrong
    assert em[0].tolist() == [20.0, 20.0, 20.0]  # a shape row pools its five colours


# --- paper map ----------------------------------------------------------------------------------

PAPER_ITEMS = {
    "finger": (24, 11),
    "countvideobench": (6, 17),
    "countercount": (6, 30),
}
"""(tables, figures) of each paper: every number up to the highest one the paper mentions."""


def test_paper_map_lists_every_table_and_figure() -> None:
    for paper, (n_tables, n_figures) in PAPER_ITEMS.items():
        items = [it.item for it in paper_map.items(paper)]
        expected = [f"Table {i}" for i in range(1, n_tables + 1)] + [f"Figure {i}" for i in range(1, n_figures + 1)]
        assert sorted(items) == sorted(expected), paper
    for it in paper_map.PAPER_MAP:
        assert it.anchor or it.reason, it  # a link, or why not


def test_paper_map_links_only_what_the_report_has() -> None:
    empty = paper_map.RunFacts()
    rows = paper_map.paper_map_rows(empty)
    assert all(r.anchor is None and r.status for r in rows)
    t15 = next(r for r in rows if r.paper == "finger" and r.item == "Table 15")
    assert "FSC-147" in t15.status
    facts = paper_map.RunFacts(anchors=frozenset({"fsc-bins", "human", "summary"}), tasks=frozenset({"image"}),
                               datasets=frozenset({"fsc147:common"}), arms=frozenset({"direct"}))  # fmt: skip
    rows = {(r.paper, r.item): r for r in paper_map.paper_map_rows(facts)}
    assert rows[("finger", "Table 15")].anchor == "fsc-bins"
    assert rows[("countvideobench", "Table 4")].anchor == "human"
    assert rows[("finger", "Table 10")].anchor is None  # needs tag-1 runs, not just a Summary
    html = paper_map.paper_map_html(facts)
    assert html.count("<tr>") == len(paper_map.PAPER_MAP) + 3  # one header row per paper


def test_paper_map_text_of_an_audit_folder(tmp_path: Path) -> None:
    (tmp_path / "report.html").write_text('<section id="summary"></section><section id="fsc-bins"></section>')
    pd.DataFrame({"task": ["image"], "dataset": ["fsc147"], "arm": ["direct"]}).to_csv(tmp_path / "episodes.csv")
    text = paper_map.paper_map_text(tmp_path)
    lines = text.splitlines()
    assert len([ln for ln in lines if ln.startswith("  ")]) == len(paper_map.PAPER_MAP)
    assert any("Table 15" in ln and "report.html#fsc-bins" in ln for ln in lines)
    assert sum("attention" in ln for ln in lines) == 6  # CounterCount's model-internals items say why
    assert "Give the Model a Finger: 3 of 35 items" in text  # Tables 1, 12 (Summary) and 15
    assert "no report.html" in paper_map.paper_map_text(tmp_path / "missing")


# --- episode columns and the added Finger tables -----------------------------------------------


def _rec(arm: str, model: str, sid: str, answer: int | None, n: int, *, dataset: str, tokens: list[int | None] = (),
         options: dict | None = None, simulated: dict | None = None, tags: list | None = None,
         size: tuple[int, int] | None = (768, 768)) -> EpisodeRecord:  # fmt: skip
    steps = [StepRecord(index=i, usage=Usage(reasoning_tokens=t)) for i, t in enumerate(tokens)]
    return EpisodeRecord(
        episode_id=f"{model}/{arm}/{sid}/{len(options or {})}", stimulus_id=sid, dataset=dataset,
        arm=ArmSpec(name=arm, options=options if options is not None else dict(ARMS[arm].env_options())),
        model=model, seed=0, steps=steps, answer=answer, tags=tags or [], end="answer", truth=Truth(n=n),
        image_size=size, stimulus_size=size,
        simulated=simulated, countgym_version="0", template_hash="0", started_at="t", finished_at="t",
    )


def test_reasoning_tokens_and_simulated_columns(tiny_dataset: Dataset) -> None:
    from countgym.analysis.audit import audit_episodes

    ds = str(tiny_dataset.root)
    recs = [
        _rec("direct", "m", "four", 4, 4, dataset=ds, tokens=[120, None, 30]),
        _rec("direct", "m", "two", 2, 2, dataset=ds, tokens=[None]),
        _rec("direct", "m", "row", 9, 10, dataset=ds, tokens=[], simulated={"profile": {"count_sigma": 0.1}, "source": "built-in"}),
    ]  # fmt: skip
    ep = audit_episodes(recs).set_index("stimulus_id")
    assert ep.loc["four", "reasoning_tokens"] == 150
    assert pd.isna(ep.loc["two", "reasoning_tokens"]) and pd.isna(ep.loc["row", "reasoning_tokens"])
    assert ep["simulated"].tolist() == [False, False, True]


def test_fsc_bins_table_known_answer() -> None:
    ep = pd.DataFrame({
        "dataset": ["fsc147:common"] * 4 + ["dotarrays"], "model": "m", "arm": "direct",
        "stimulus_id": ["a", "b", "c", "d", "e"], "n_true": [10, 12, 70, 30, 10],
        "correct": [True, False, True, False, True], "abs_error": [0.0, 2.0, 0.0, 5.0, 0.0], "end": "answer",
    })  # fmt: skip
    t = fsc_bins_table(ep, n_resamples=200)
    assert t["count_bin"].tolist() == ["8–15", "26–40", "61–80"]  # paper order; the DotArrays row is not FSC
    assert t["em"].tolist() == [0.5, 0.0, 1.0] and t["n_images"].tolist() == [2, 1, 1]
    assert t["mae"].tolist() == [1.0, 5.0, 0.0]


def test_thinking_off_table_pairs_direct_with_its_variant() -> None:
    ep = pd.DataFrame({
        "dataset": "dotarrays-main", "model": "m", "arm": ["direct", "direct", "direct[thinking=False]", "direct[thinking=False]"],
        "thinking": [None, None, False, False], "stimulus_id": ["a", "b", "a", "b"], "correct": [True, True, True, False],
        "reasoning_tokens": [100, 300, pd.NA, 10], "end": "answer",
    })  # fmt: skip
    contrasts = pd.DataFrame([{"dataset": "dotarrays-main", "model": "m", "arm_a": "direct", "arm_b": "direct[thinking=False]",
                               "metric": "exact_match_score", "n_pairs": 2, "value_a": 1.0, "value_b": 0.5,
                               "difference": -0.5, "ci_low": -1.0, "ci_high": 0.0}])  # fmt: skip
    summary = pd.DataFrame({"dataset": "dotarrays-main", "model": "m", "arm": ["direct", "direct[thinking=False]"],
                            "scope": "dataset", "r80": [10.0, 6.0]})  # fmt: skip
    t = thinking_off_table(ep, contrasts, summary).iloc[0]
    assert (t["arm_on"], t["arm_off"]) == ("direct", "direct[thinking=False]")
    assert (t["em_on"], t["em_off"], t["em_change"]) == (1.0, 0.5, -0.5)
    assert (t["r80_on"], t["r80_off"]) == (10.0, 6.0)
    assert t["reasoning_tokens_on"] == 200.0 and t["reasoning_tokens_off"] == 10.0
    tok = reasoning_tokens_table(ep).set_index("arm")
    assert tok.loc["direct", "reporting_share"] == 1.0 and tok.loc["direct[thinking=False]", "reporting_share"] == 0.5


# --- SIMULATED ----------------------------------------------------------------------------------


def _records(tiny_dataset: Dataset, simulated: dict | None) -> list[EpisodeRecord]:
    ds = str(tiny_dataset.root)
    out = []
    for model in ("openai/sim-a", "openai/sim-b"):
        for sid, n in (("four", 4), ("two", 2), ("row", 10)):
            out.append(_rec("direct", model, sid, n - 1, n, dataset=ds, simulated=simulated))
            pts = [list(p) for p in Dataset(ds)[sid].points]
            out.append(_rec("tag", model, sid, n, n, dataset=ds, simulated=simulated, tags=pts))
    return out


SIM = {"profile": {"omission": 0.1, "count_sigma": 0.1}, "source": "profile.toml"}


@pytest.fixture(scope="module")
def small_audits(tiny_dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """The audit folders of ``_records``, simulated (True) and real (False), each written once for
    every test of this file that reads it."""
    from countgym.analysis import write_audit_files

    out = {}
    for simulated in (True, False):
        out[simulated] = tmp_path_factory.mktemp("small-audit")
        write_audit_files(_records(tiny_dataset, SIM if simulated else None), out[simulated], n_resamples=50)
    return out


@pytest.mark.parametrize("simulated", [SIM, None], ids=["simulated", "real"])
def test_simulated_runs_are_marked_on_every_table(small_audits: dict[bool, Path], simulated: dict | None) -> None:
    tmp_path = small_audits[bool(simulated)]
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    summary = pd.read_csv(tmp_path / "summary.csv")
    episodes = pd.read_csv(tmp_path / "episodes.csv")
    tables = re.findall(r"<table\b[^>]*>(.{0,80})", page)
    assert tables
    if simulated:
        assert "<h1>SIMULATED · " in page and 'class="simulated-banner"' in page and "profile.toml" in page
        assert all(t.startswith('<caption class="simulated">SIMULATED</caption>') for t in tables)
        assert page.count("<figcaption>") == page.count('<figcaption><b class="simulated">SIMULATED</b>')
        assert summary["simulated"].all() and episodes["simulated"].all()
    else:
        assert "SIMULATED" not in page
        assert "simulated" not in summary.columns and not episodes["simulated"].any()
    from countgym.analysis.glance import glance_of_audit, render

    text = render(glance_of_audit(tmp_path), where="full tables: summary.csv")  # the terminal table
    assert ("SIMULATED" in text) == bool(simulated)


def test_study_report_links_every_mapped_anchor(small_audits: dict[bool, Path]) -> None:
    tmp_path = small_audits[False]
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    ids = set(re.findall(r'\sid="([^"]+)"', page))
    section = page[page.index('<section id="paper-map"'):page.index("</section>", page.index('<section id="paper-map"'))]
    links = re.findall(r'href="#([^"]+)"', section)
    assert links and set(links) <= ids  # every link of the map lands on something
    assert {"summary", "fig-tag_gain", "human"} <= set(links)
    assert page.index('id="paper-map"') < page.index('id="summary"')
    text = paper_map.paper_map_text(tmp_path)
    assert "report.html#fig-tag_gain" in text and "needs FSC-147 runs" in text


# --- a study-scale report in headless Chromium at 1400 px ----------------------------------------

STUDY_MODELS = [f"openrouter/vendor/a-rather-long-model-name-{i}" for i in range(3)]


def _study_records(datasets: list[Dataset]) -> list[EpisodeRecord]:
    """Three models x 15 arm variants (ablations, a plug-in) x two datasets, answers off by a
    model-dependent amount, tags on every object for the tagging arms."""
    tag = dict(ARMS["tag"].env_options())
    variants = [("direct", None), ("cot", None), ("list", None), ("tag", None), ("tag+crop", None), ("full", None),
                ("tiles", None), ("tag-1", None), ("tag", {**tag, "budget": 3}), ("tag", {**tag, "budget": 12}),
                ("tag", {**tag, "verify": False}), ("tag", {**tag, "numbered": False}),
                ("direct", {**ARMS["direct"].env_options(), "thinking": False}), (LONG, {}), (LONG + "Twice", {})]  # fmt: skip
    out = []
    for ds in datasets:
        for mi, model in enumerate(STUDY_MODELS):
            for vi, (arm, opts) in enumerate(variants):
                for stim in ds:
                    answer = stim.n + (mi + vi) % 3 - 1
                    tags = [list(p) for p in stim.points] if arm.startswith("tag") or arm in ("full", "list") else None
                    with Image.open(ds.root / stim.image) as im:
                        size = im.size
                    r = _rec(arm if arm in ARMS else "direct", model, stim.id, answer, stim.n, dataset=str(ds.root),
                             options=opts, tags=tags, size=size)  # fmt: skip
                    if arm not in ARMS:
                        r = r.model_copy(update={"arm": ArmSpec(name=arm, options={})})
                    out.append(r.model_copy(update={"episode_id": f"{ds.root.name}/{model}/{vi}/{stim.id}"}))
    return out


@pytest.fixture(scope="module")
def study_report(tiny_dataset: Dataset, wide_dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from countgym.analysis import write_audit_files

    out = tmp_path_factory.mktemp("study-audit")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # matplotlib layout warnings are UserWarnings
        write_audit_files(_study_records([tiny_dataset, wide_dataset]), out, n_resamples=50)
    return out


@pytest.mark.slow
def test_study_figures_respect_the_series_limit(study_report: Path) -> None:
    page = (study_report / "report.html").read_text(encoding="utf-8")
    figures = sorted(p.name for p in (study_report / "figures").glob("*.png"))
    assert "arm_comparison.png" in figures and "tag_gain.png" in figures
    assert "Label keys of this figure" in page  # the plug-in's label became a key
    assert LONG in page


@pytest.mark.slow
def test_study_report_fits_a_1400px_window(study_report: Path, tmp_path: Path) -> None:
    from tests.test_report_layout import CHROMIUM, _assert_fits, _measure

    if CHROMIUM is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    r = _measure((study_report / "report.html").read_text(encoding="utf-8"), tmp_path, tmp_path)
    assert {"paper-map", "summary", "arms", "capacity", "human"} <= set(r["sections"])
    _assert_fits(r)


def test_video_heatmap_with_a_plugin_label_keeps_its_labels_on_the_figure(tmp_path: Path) -> None:
    from countgym.analysis import bias

    long = f"{LONG} / {LONG}"
    df = pd.DataFrame({"model": [long] * 4 + ["openai/internvl2.5-8b / video-p1"] * 4,
                       "n_true": [8, 19, 31, 42] * 2, "answer": [8, 20, 31, 40] * 2})  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Tight layout not applied" was a warning here
        fig = bias.cardinality_heatmap(df)
        fig.canvas.draw()
    width = fig.bbox.width
    for t in fig.axes[0].get_yticklabels():
        box = t.get_window_extent()
        assert box.x0 >= 0 and box.x1 <= width, t.get_text()
    assert any("…" in t.get_text() for t in fig.axes[0].get_yticklabels())
    bias.save_figure(fig, tmp_path / "em.png")


@pytest.mark.slow
def test_the_order_effect_table_of_a_study_fits(tmp_path: Path) -> None:
    """The real order_effect.csv columns (15, with an interval) on a study's labels: it scrolled
    sideways by 8 px before its labels could wrap."""
    from countgym.analysis.report import CSS, principles_section
    from tests.test_report_layout import CHROMIUM, _assert_fits, _measure

    if CHROMIUM is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    cols = ["dataset", "model", "arm_a", "arm_b", "n_stimuli", "exact_match_a", "exact_match_b", "traversal_tau_a",
            "traversal_tau_b", "repeat_disagreement", "cross_agreement", "cross_disagreement", "order_effect",
            "order_effect_ci_low", "order_effect_ci_high"]  # fmt: skip
    row = ["/runs/data/dotarrays:ablation", "openrouter/google/gemini-3.1-flash-lite-preview", "tag[order=reading]",
           "tag[order=reverse]", 68, 0.5, 0.25, 0.873, -0.912, 0.125, 0.5, 0.5, -0.375, -0.625, -0.125]  # fmt: skip
    df = pd.DataFrame([row] * 3, columns=cols)
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{CSS}</style></head><body><main>"
            f"{principles_section({'order_effect': df})}</main></body></html>")  # fmt: skip
    assert "order_effect [95% CI]" in page.replace("<wbr>", "") and "-0.375 [-0.625, -0.125]" in page
    _assert_fits(_measure(page, tmp_path, tmp_path))
