"""The report's layout: navigation, the CounterCount/CountVideoBench table format, figure sizes,
and (in headless Chromium) that nothing is wider than a 1400 px window.

Runs go through the real path: the litellm backend against the local test server (with answer
noise), the single-step and tool-loop environments, ``write_audit_files``. The browser check
needs Debian's ``chromium`` and is skipped with that reason when it is missing.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from countgym.analysis import write_audit_files
from countgym.analysis.pipeline import compute_tables
from countgym.analysis.report import display_title, render_report
from countgym.logs import read_records
from countgym.runner import CellSpec, run_cell
from countgym.stimulus import Dataset
from countgym.testing.server import TestServer

pytestmark = pytest.mark.slow  # full reports over three tasks, figures measured

CI_CELL = re.compile(r"^-?\d+\.\d\d \[-?\d+\.\d\d, -?\d+\.\d\d\]$")
NO_CI_CELL = re.compile(r"^-?\d+\.\d\d \[–\]$")
"""A value whose interval is not estimable (small n); its row says why."""
WHY = "[–]: why no CI"


@pytest.fixture(scope="module")
def server() -> Iterator[TestServer]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", "sk-test-layout")
        with TestServer(noise=0.2, seed=3) as srv:
            yield srv


@pytest.fixture(scope="module")
def runs(
    server: TestServer, tiny_dataset: Dataset, tiny_countercount: Path, tiny_countvideo: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Path]:
    """One run folder per task: image (direct, tag), CounterCount (MCQ, OE, MCQ + blur), video (P1, P3)."""
    base = tmp_path_factory.mktemp("layout-runs")
    cells = {
        "image": (str(tiny_dataset.root), ("direct", "tag")),
        "countercount": (str(tiny_countercount), ("cf-mcq", "cf-oe", "cf-mcq+blur")),
        "video": (str(tiny_countvideo), ("video-p1", "video-p3")),
    }
    out = {}
    for task, (data, arms) in cells.items():
        for arm in arms:
            spec = CellSpec(dataset=data, agent=arm, model="openai/blob", agent_options={"api_base": server.base_url})
            res = run_cell(spec, base / task, concurrency=2, progress=False)
            assert res.errors == 0, res.error_messages
        out[task] = base / task
    return out


def _audit(runs: dict[str, Path], tasks: tuple[str, ...], out: Path) -> str:
    write_audit_files([runs[t] for t in tasks], out, n_resamples=100)
    return (out / "report.html").read_text(encoding="utf-8")


ALL_TASKS = ("image", "countercount", "video")


@pytest.fixture(scope="module")
def full_report(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("layout-audit")
    _audit(runs, ALL_TASKS, out)
    return out


def _sections_and_nav(page: str) -> tuple[list[str], list[str]]:
    sections = re.findall(r'<section id="([^"]+)"', page)
    nav = re.search(r"<nav>(.*?)</nav>", page, re.DOTALL)
    assert nav is not None
    return sections, re.findall(r'<a href="#([^"]+)">', nav.group(1))


# --- navigation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tasks",
    [("countercount",), ("image", "video"), ALL_TASKS],
    ids=["one-task", "two-tasks", "three-tasks"],
)
def test_navigation_lists_exactly_the_sections_present(
    runs: dict[str, Path], tasks: tuple[str, ...], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if tasks == ALL_TASKS:  # the same audit as the module's full report: read, not redone
        page = (request.getfixturevalue("full_report") / "report.html").read_text(encoding="utf-8")
    else:
        page = _audit(runs, tasks, tmp_path / "audit")
    sections, nav = _sections_and_nav(page)
    assert nav == sections  # every present section linked, in page order, and nothing else
    assert len(set(nav)) == len(nav)
    assert ("countercount" in nav) == ("countercount" in tasks)
    assert ("countvideo" in nav) == ("video" in tasks)
    # The image task's figure sections exist only when their figures do.
    for anchor in ("range", "capacity"):
        assert (anchor in nav) == (f'id="{anchor}"' in page)


def test_report_title_shows_a_name_not_a_path(runs: dict[str, Path]) -> None:
    tables = compute_tables(read_records([runs["image"]]), n_resamples=50)
    page = render_report(tables, figures={}, viewer=None, provenance={}, title="/home/someone/runs/finger-tier1/")
    assert "<h1>finger-tier1</h1>" in page and "<title>finger-tier1</title>" in page
    assert "/home/someone" not in page
    assert display_title("C:\\runs\\cv") == "cv" and display_title("my study") == "my study"


# --- the task tables use the Summary's "value [95% CI]" cells ------------------------------------


def _table_after(page: str, heading: str) -> tuple[list[str], list[list[str]]]:
    start = page.index(f"<h3>{heading}</h3>")
    table = page[start: page.index("</table>", start)]
    heads = [h.replace("<wbr>", "") for h in re.findall(r"<th>(.*?)</th>", table)]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
    return heads, rows


@pytest.mark.parametrize("heading", ["scores", "by category", "by CF count", "interventions (paired deltas)"])
def test_countercount_tables_use_value_ci_cells(full_report: Path, heading: str) -> None:
    page = (full_report / "report.html").read_text(encoding="utf-8")
    section = page[page.index('<section id="countercount"'):]
    heads, rows = _table_after(section, heading)
    ci_heads = [h for h in heads if h.endswith("[95% CI]")]
    assert ci_heads, heads
    assert not [h for h in heads if h.endswith(("_low", "_high"))], heads  # no bare bound columns
    assert rows
    for row in rows:
        cells = dict(zip(heads, row, strict=True))
        for h in ci_heads:
            # Every CF item is scored, so each rate has an interval (paired deltas included), or
            # one the bootstrap cannot give at this size, whose row says why.
            if NO_CI_CELL.match(cells[h]):
                assert cells.get(WHY), (h, cells)
            else:
                assert CI_CELL.match(cells[h]) or cells[h] == "–", (h, cells[h])
    if heading == "scores":
        assert {"factual acc. [95% CI]", "CF acc. [95% CI]", "bias rate [95% CI]"} <= set(heads)
        cf = [dict(zip(heads, r, strict=True)) for r in rows]
        assert all(CI_CELL.match(c["CF acc. [95% CI]"]) or c[WHY] for c in cf)


def test_video_table_uses_value_ci_cells_and_the_csv_keeps_the_bounds(full_report: Path) -> None:
    page = (full_report / "report.html").read_text(encoding="utf-8")
    section = page[page.index('<section id="countvideo"'):]
    heads, rows = _table_after(section, "bias")
    assert "EM [95% CI]" in heads and "MAE [95% CI]" in heads
    models = [dict(zip(heads, r, strict=True)) for r in rows if r[0] != "Oracle"]
    assert len(models) == 2
    assert all(CI_CELL.match(m["EM [95% CI]"]) or (NO_CI_CELL.match(m["EM [95% CI]"]) and m[WHY]) for m in models)
    csv = (full_report / "countvideo" / "bias.csv").read_text().splitlines()[0].split(",")
    assert csv.index("exact_match_low") == csv.index("exact_match") + 1
    assert {"mae_low", "mae_high"} <= set(csv)


# --- figure sizes -------------------------------------------------------------------------------


def test_heatmap_of_26_cardinalities_fits_and_histogram_ticks_do_not_collide(tmp_path: Path) -> None:
    import pandas as pd

    from countgym.analysis import bias

    truth = list(range(1, 27)) * 2
    preds = [n + (1 if i % 3 else 0) for i, n in enumerate(truth)]
    preds[5] = 1040  # one wild answer widens the axis
    df = pd.DataFrame({"model": ["a"] * 26 + ["b"] * 26, "n_true": truth, "answer": preds})
    path = bias.save_figure(bias.cardinality_heatmap(df), tmp_path / "em.png")
    with Image.open(path) as im:
        assert im.width <= 1300
    fig = bias.prediction_histogram(preds, truth_values=truth)
    fig.canvas.draw()
    ax = fig.axes[0]
    boxes = [t.get_window_extent() for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
    lo, hi = ax.get_xlim()
    boxes = [b for b, v in zip(boxes, ax.get_xticks(), strict=False) if lo <= v <= hi]
    assert 3 <= len(boxes) <= 20
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False)), "tick labels overlap"
    assert min(t.get_fontsize() for t in ax.get_xticklabels()) >= 8


def test_report_figures_have_no_text_smaller_than_8pt(runs: dict[str, Path]) -> None:
    from matplotlib.text import Text

    from countgym.analysis import plots
    from countgym.analysis.summary import primary_rows

    tables = compute_tables(read_records([runs["image"]]), n_resamples=50)
    summary = primary_rows(tables.summary)
    figs = [plots.accuracy_vs_n(tables.accuracy_by_n, summary, tables.counting_range),
            plots.arm_comparison(summary, tables.contrasts), plots.capacity_profile(summary, tables.contrasts),
            plots.tau_sensitivity(summary)]  # fmt: skip
    assert all(f is not None for f in figs)
    for fig in figs:
        sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text() and t.get_visible()]
        assert sizes and min(sizes) >= 8, sorted(sizes)[:5]


def test_countercount_bars_of_17_categories_fit_the_layout() -> None:
    import pandas as pd

    from countgym.analysis import cf
    from countgym.analysis.plots import figure_png

    cats = [f"category {i}" for i in range(17)]
    scores = pd.DataFrame({"category": cats, **{f"cf_accuracy{s}": [0.5] * 17 for s in ("", "_low", "_high")}})
    png = figure_png(cf._bars(scores, "category", [("cf_accuracy", "CF acc.")], "by category"))
    with Image.open(io.BytesIO(png)) as im:
        assert im.width <= 1300


# --- a real browser at 1400 px ------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium not installed (Debian: apt-get install -y chromium); browser checks skipped",
)

MEASURE = """<script>window.addEventListener("load", function () {
  var r = {doc: document.documentElement.scrollWidth, sections: {}, wraps: [], images: []};
  document.querySelectorAll("section").forEach(function (s) {
    r.sections[s.id] = [s.scrollWidth, Math.round(s.getBoundingClientRect().right)]; });
  document.querySelectorAll(".table-wrap").forEach(function (w) {
    r.wraps.push([w.closest("section").id, w.scrollWidth, w.clientWidth]); });
  document.querySelectorAll("main img").forEach(function (i) {
    if (!i.closest(".viewer")) {
      r.images.push([i.closest("section").id, i.naturalWidth, i.getBoundingClientRect().width]); } });
  var p = document.createElement("pre"); p.id = "cg-measure"; p.textContent = JSON.stringify(r);
  document.body.appendChild(p);
});</script>"""


def _measure(page: str, where: Path, tmp_path: Path) -> dict:
    """Layout facts of ``page`` opened in headless Chromium at a 1400 px window."""
    probe = where / "measure.html"
    probe.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    assert CHROMIUM is not None
    res = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--hide-scrollbars",
         "--window-size=1400,1000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    m = re.search(r'<pre id="cg-measure">(.*?)</pre>', res.stdout, re.DOTALL)
    assert m is not None, res.stderr[-2000:]
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def _assert_fits(r: dict) -> None:
    assert r["doc"] <= 1400  # the page never scrolls sideways
    for sid, (scroll, right) in r["sections"].items():
        assert scroll <= 1352 and right <= 1400, (sid, scroll, right)
    for sid, scroll, client in r["wraps"]:
        assert scroll <= client + 1, f"a table in {sid} scrolls sideways ({scroll} > {client} px)"
    for sid, natural, shown in r["images"]:
        # Shown at (nearly) full size: the tick labels keep the size they were drawn at.
        assert shown <= 1352 and shown >= 0.95 * natural, (sid, natural, shown)


@needs_chromium
def test_nothing_is_wider_than_a_1400px_window(full_report: Path, tmp_path: Path) -> None:
    r = _measure((full_report / "report.html").read_text(encoding="utf-8"), tmp_path, tmp_path)
    assert {"summary", "countercount", "countvideo", "viewer"} <= set(r["sections"])
    assert {s for s, *_ in r["images"]} >= {"countercount", "countvideo"}
    _assert_fits(r)


@needs_chromium
def test_a_principle_table_with_many_long_columns_fits(runs: dict[str, Path], tmp_path: Path) -> None:
    import dataclasses

    import pandas as pd

    tables = compute_tables(read_records([runs["image"]]), n_resamples=50)
    cols = ["dataset", "model", "arm", "kind", "arm_unperturbed", "n_trajectories", "n_skipped", "repair_rate",
            "n_discriminating", "visible_share", "emitted_share", "n_paired", "answer_shift_mean",
            "answer_shift_repaired_mean", "answer_shift_unrepaired_mean"]  # fmt: skip
    wide = pd.DataFrame([["/data/dotarrays:ablation", "openrouter/qwen/qwen3-vl-32b-instruct", "tag+perturb=remove",
                          "remove", "tag", 272, 3, 0.41, 200, 0.52, 0.31, 270, -0.37, -0.12, -0.88]] * 3, columns=cols)  # fmt: skip
    page = render_report(dataclasses.replace(tables, principles={"perturbation": wide}), figures={}, viewer=None,
                         provenance={"episodes": 3})  # fmt: skip
    r = _measure(page, tmp_path, tmp_path)
    assert "principles" in r["sections"]
    _assert_fits(r)
