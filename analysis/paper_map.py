"""The paper map: every table and figure of the three papers, and where the report has it.

Each entry names a report anchor (``report.html#anchor``) and a condition on the audited runs
(a task, a dataset, an arm); an entry whose anchor is in the report and whose condition holds
links there, any other entry says why it is not there ("needs FSC-147 runs", "not in this
folder's runs", "human study: paper values only", ...). ``paper_map_rows`` evaluates the map
against what an audit holds, ``paper_map_html`` is the report's "Paper map" section and
``paper_map_text(audit_dir)`` the same map as plain text for the terminal.

Numbering follows the papers' own tables and figures; an item the paper text never describes
(an appendix table it only numbers) is listed with that reason, so the map has no gaps.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

PAPERS: tuple[tuple[str, str], ...] = (
    ("finger", "Give the Model a Finger"),
    ("countvideobench", "CountVideoBench"),
    ("countercount", "CounterCount"),
)
"""(key, title) of the three papers, in the map's order."""


@dataclass(frozen=True)
class RunFacts:
    """What an audit holds: the report's anchors and the episodes' tasks, datasets and arms."""

    anchors: frozenset[str] = frozenset()
    tasks: frozenset[str] = frozenset()
    datasets: frozenset[str] = frozenset()
    arms: frozenset[str] = frozenset()
    simulated: bool = False

    def has_dataset(self, prefix: str) -> bool:
        """A dataset whose battery name (or folder name) starts with ``prefix``."""
        return any(_dataset_name(d).startswith(prefix) for d in self.datasets)

    def has_arm(self, *names: str) -> bool:
        """An arm label whose bare name (before ``[``) is one of ``names``."""
        return any(a.split("[", 1)[0] in names for a in self.arms)

    def has_arm_text(self, text: str) -> bool:
        return any(text in a for a in self.arms)


Check = Callable[[RunFacts], bool]


@dataclass(frozen=True)
class PaperItem:
    """One table or figure of a paper and where (or why not) the report has it."""

    paper: str
    item: str
    """``Table 15``, ``Figure 4``."""
    content: str
    anchor: str | None = None
    """Report anchor holding it; None: the report never has it (``reason`` says why)."""
    reason: str = ""
    """Why the report has no such output (always shown when ``anchor`` is None)."""
    needs: str = "not in this folder's runs"
    """Shown when the anchor or the runs it needs are missing from this audit."""
    check: Check | None = field(default=None, compare=False)
    """Condition on the audited runs beyond the anchor's presence."""
    where: str = ""
    """Where inside the anchored section to look (rows, columns, figure file)."""


def _image(f: RunFacts) -> bool:
    return "image" in f.tasks


def _dots(f: RunFacts) -> bool:
    return f.has_dataset("dotarrays")


def _fsc(f: RunFacts) -> bool:
    return f.has_dataset("fsc147")


def _video(f: RunFacts) -> bool:
    return "video" in f.tasks


def _cf(f: RunFacts) -> bool:
    return "countercount" in f.tasks


NO_TEXT = "appendix item the paper text does not describe: no protocol to reproduce"

FINGER: tuple[PaperItem, ...] = (
    PaperItem("finger", "Table 1", "EM of every arm on the common subset", "summary", check=_image,
              where="Summary rows of the common-subset datasets (dotarrays:common, fsc147:common, pixmo:common)"),
    PaperItem("finger", "Table 2", "capacity profile with bootstrap CIs (DotArrays + FSC-147 pooled)", "capacity",
              check=_image, needs="needs tagging arms on stimuli with point ground truth"),
    PaperItem("finger", "Table 3", "paired bootstrap CIs of the headline arm contrasts", "contrasts", check=_image),
    PaperItem("finger", "Table 4", "positioning against related work", reason="related-work comparison: no data to compute"),
    PaperItem("finger", "Table 5", "tools mapped to child strategies and principles",
              reason="conceptual table: the tools are in docs/image-tool-env.md"),
    PaperItem("finger", "Table 6", "audit with tau scaled by 0.75 and 1.5", "fig-tau_sensitivity", check=_image,
              needs="needs tagging arms on stimuli with point ground truth",
              where="tau-sensitivity figure; the *_t075 / *_t150 columns of summary.csv"),
    PaperItem("finger", "Table 7", "R80 with 95 % CIs (main battery, main + XL)", "range", check=_dots,
              needs="needs DotArrays main-battery runs", where="R80 table"),
    PaperItem("finger", "Table 8", "paired contrasts on DotArrays", "contrasts", check=_dots,
              needs="needs DotArrays runs with two arms of one model", where="rows of the dotarrays datasets"),
    PaperItem("finger", "Table 9", "order irrelevance: realised traversal, repeat control, cross agreement",
              "p-order_effect", needs="needs the order arms run twice (finger-order.toml)"),
    PaperItem("finger", "Table 10", "strict seriality: direct, tag and tag-1", "summary",
              check=lambda f: f.has_arm("tag-1"), needs="needs tag-1 runs (finger-tag1.toml)",
              where="Summary rows of the arms direct, tag and tag-1"),
    PaperItem("finger", "Table 11", "appendix table", reason=NO_TEXT),
    PaperItem("finger", "Table 12", "MAE of every arm on the common subset", "summary", check=_image,
              where="MAE column of the Summary"),
    PaperItem("finger", "Table 13", "appendix table", reason=NO_TEXT),
    PaperItem("finger", "Table 14", "appendix table", reason=NO_TEXT),
    PaperItem("finger", "Table 15", "FSC-147 exact accuracy by count bin", "fsc-bins", check=_fsc,
              needs="needs FSC-147 runs (COUNTGYM_FSC147_ROOT)"),
    PaperItem("finger", "Table 16", "appendix table", reason=NO_TEXT),
    PaperItem("finger", "Table 17", "appendix table", reason=NO_TEXT),
    PaperItem("finger", "Table 18", "appendix table", reason=NO_TEXT),
    PaperItem("finger", "Table 19", "tags vs direct answers; departures from the tag count", "p-tags_vs_direct",
              needs="needs direct and tag runs of one model on the same images"),
    PaperItem("finger", "Table 20", "tag-perturbation probe (remove / add)", "p-perturbation",
              needs="needs the perturbation arms (finger-perturbation.toml)"),
    PaperItem("finger", "Table 21", "thinking-off control and hidden reasoning tokens", "thinking-off",
              needs="needs direct runs with and without thinking (finger-thinking-off.toml)"),
    PaperItem("finger", "Table 22", "lattice controls: accuracy on rotated, hexagonal and holed lattices", "summary",
              check=lambda f: f.has_dataset("lattice"), needs="needs lattice runs (finger-lattice.toml)",
              where="Summary rows of the lattice dataset, one per set"),
    PaperItem("finger", "Table 23", "tags on dots or on the grid: offset slope and distance ratio", "p-lattice",
              needs="needs tagging runs on regular or lattice arrays"),
    PaperItem("finger", "Table 24", "paired tag vs list contrasts", "contrasts",
              check=lambda f: f.has_arm("tag") and f.has_arm("list"), needs="needs tag and list runs",
              where="rows tag vs list"),
    PaperItem("finger", "Figure 1", "the tag loop (system prompt, tools, verification)", "viewer",
              check=lambda f: f.has_arm("tag", "tag+crop", "full", "tag-1"), needs="needs tool-loop runs",
              where="any tag episode in the trajectory viewer"),
    PaperItem("finger", "Figure 2", "extended range: accuracy vs n up to 200 (XL)", "range",
              check=lambda f: f.has_dataset("dotarrays-xl"), needs="needs XL runs (finger-xl.toml)",
              where="main+xl panels and rows"),
    PaperItem("finger", "Figure 3", "figure", reason=NO_TEXT),
    PaperItem("finger", "Figure 4", "gain from tagging vs pointing error, per model", "fig-tag_gain",
              needs="needs direct and tagging runs of one model on stimuli with point ground truth"),
    PaperItem("finger", "Figure 5", "(a) R80 per model and arm", "range", check=_dots,
              needs="needs DotArrays main-battery runs", where="R80 table and the accuracy-vs-n panels"),
    PaperItem("finger", "Figure 6", "an example trajectory re-rendered step by step", "viewer", check=_image,
              where="trajectory viewer"),
    PaperItem("finger", "Figure 7", "an example trajectory (success story)", "viewer", check=_image,
              where="trajectory viewer"),
    PaperItem("finger", "Figure 8", "exact accuracy vs n on the main battery, every model", "range", check=_dots,
              needs="needs DotArrays main-battery runs"),
    PaperItem("finger", "Figure 9", "capacity profile per dataset and arm", "capacity",
              needs="needs tagging arms on stimuli with point ground truth"),
    PaperItem("finger", "Figure 10", "figure", reason=NO_TEXT),
    PaperItem("finger", "Figure 11", "capacity profile per dataset and arm (error mix)", "capacity",
              needs="needs tagging arms on stimuli with point ground truth"),
)

CVB: tuple[PaperItem, ...] = (
    PaperItem("countvideobench", "Table 1", "count distributions of other video benchmarks",
              reason="statistics of other benchmarks: paper values only"),
    PaperItem("countvideobench", "Table 2", "EM, Acc@10%, MAE, RMSE, coverage, |S|, PP per model", "countvideo",
              check=_video, needs="needs video runs (countvideo-main.toml)", where="bias table"),
    PaperItem("countvideobench", "Table 3", "generation parameters",
              reason="generator settings: docs/countvideobench.md"),
    PaperItem("countvideobench", "Table 4", "human baseline and models on the 104-video subset", "human",
              where="human rows (paper values); model rows: the CountVideoBench section"),
    PaperItem("countvideobench", "Table 5", "prompt robustness P1-P3", "countvideo",
              check=lambda f: f.has_arm("video-p2", "video-p3"), needs="needs the prompt arms (countvideo-prompts.toml)",
              where="one bias-table row per model and prompt arm"),
    PaperItem("countvideobench", "Table 6", "EM by object class (shape, colour)", "countvideo", check=_video,
              needs="needs video runs", where="EM (%) by object class"),
    PaperItem("countvideobench", "Figure 1", "example frames", "viewer", check=_video, needs="needs video runs",
              where="video episodes in the trajectory viewer"),
    PaperItem("countvideobench", "Figure 2", "count distributions of other video benchmarks",
              reason="other benchmarks' data: paper values only"),
    PaperItem("countvideobench", "Figure 3", "coverage by ground-truth count", "countvideo", check=_video,
              needs="needs video runs", where="figure coverage_by_count.png"),
    PaperItem("countvideobench", "Figure 4", "EM by ground-truth count and model", "countvideo", check=_video,
              needs="needs video runs", where="figure exact_match_by_count.png"),
    PaperItem("countvideobench", "Figure 5", "distributions of predicted counts", "countvideo", check=_video,
              needs="needs video runs", where="figures predictions_*.png"),
    PaperItem("countvideobench", "Figure 6", "count distributions of representative benchmarks",
              reason="other benchmarks' data: paper values only"),
    PaperItem("countvideobench", "Figure 7", "EM by cardinality on the human-study subset, models and humans", "human",
              where="human row: paper values; model rows: exact_match_by_count.png"),
    *(PaperItem("countvideobench", f"Figure {k}", "distributions of predicted counts, per model (Appendix D)",
                "countvideo", check=_video, needs="needs video runs", where="figures predictions_*.png")
      for k in range(8, 16)),
    PaperItem("countvideobench", "Figure 16", "EM by count for three models under P1-P3", "countvideo",
              check=lambda f: f.has_arm("video-p2", "video-p3"), needs="needs the prompt arms (countvideo-prompts.toml)",
              where="exact_match_by_count.png, one row per model and prompt arm"),
    PaperItem("countvideobench", "Figure 17", "EM by count and object class, per model", "cv-class-count",
              check=_video, needs="needs video runs with class metadata"),
)

_ATTN = "needs model internals (attention weights): countgym calls models through their APIs"
CC: tuple[PaperItem, ...] = (
    PaperItem("countercount", "Table 1", "dataset statistics", reason="statistics of the released data: docs/countercount.md"),
    PaperItem("countercount", "Table 2", "comparison with prior benchmarks", reason="related-work comparison: no data to compute"),
    PaperItem("countercount", "Table 3", "distractor generation for MCQ options",
              reason="question construction: docs/countercount.md"),
    PaperItem("countercount", "Table 4", "sampling parameters of thinking mode",
              reason="decoding settings: docs/reproduce.md (Decoding)"),
    PaperItem("countercount", "Table 5", "attention-modulation configuration per model", reason=_ATTN),
    PaperItem("countercount", "Table 6", "qualification set of the human study", reason="human study: paper values only"),
    PaperItem("countercount", "Figure 1", "humans vs models, factual and CF accuracy", "human",
              where="human rows (paper values); model means: the CounterCount cross-model figure"),
    PaperItem("countercount", "Figure 2", "image-generation pipeline", reason="illustration of the dataset pipeline"),
    PaperItem("countercount", "Figure 3", "region annotations (mask, box, token grid)",
              reason="annotation illustration: the boxes are in the dataset, used by the blur intervention"),
    PaperItem("countercount", "Figure 4", "(a) MCQ accuracy per model and cross-model mean with CI; (b) bias", "cf-mean",
              check=_cf, needs="needs CounterCount runs (countercount-baseline.toml)"),
    PaperItem("countercount", "Figure 5", "scaling within model families", "countercount", check=_cf,
              needs="needs CounterCount runs", where="scores table, one row per model"),
    PaperItem("countercount", "Figure 6", "(a) CF accuracy by count; (b) bias by removal vs addition", "countercount",
              check=_cf, needs="needs CounterCount runs", where="by CF count and by edit"),
    PaperItem("countercount", "Figure 7", "blur intervention", "countercount",
              check=lambda f: f.has_arm_text("blur"), needs="needs blur runs (countercount-blur.toml)",
              where="interventions (paired deltas)"),
    PaperItem("countercount", "Figure 8", "cue instruction, models and humans", "countercount",
              check=lambda f: f.has_arm_text("cue"), needs="needs cue runs (countercount-cue.toml)",
              where="interventions (paired deltas); human values in the Human baselines section"),
    PaperItem("countercount", "Figure 9", "thinking mode", "countercount",
              check=lambda f: f.has_arm_text("think"), needs="needs thinking runs (countercount-thinking.toml)",
              where="interventions (paired deltas)"),
    PaperItem("countercount", "Figure 10", "attention to count-relevant tokens", reason=_ATTN),
    PaperItem("countercount", "Figure 11", "attention modulation", reason=_ATTN),
    PaperItem("countercount", "Figure 12", "example factual and CF pairs", "viewer", check=_cf,
              needs="needs CounterCount runs", where="CounterCount episodes in the trajectory viewer"),
    PaperItem("countercount", "Figure 13", "baseline MCQ, remaining models", "cf-mean", check=_cf,
              needs="needs CounterCount runs", where="per-model panels"),
    PaperItem("countercount", "Figure 14", "baseline OE, all models", "cf-mean",
              check=lambda f: f.has_arm("cf-oe"), needs="needs OE runs", where="OE panels"),
    PaperItem("countercount", "Figure 15", "factual and CF accuracy per category", "countercount", check=_cf,
              needs="needs CounterCount runs", where="by category"),
    PaperItem("countercount", "Figure 16", "CF predictions per category: correct, biased, other", "countercount",
              check=_cf, needs="needs CounterCount runs", where="by category"),
    PaperItem("countercount", "Figure 17", "generic subject names", "countercount",
              check=lambda f: f.has_arm_text("generic"), needs="needs generic runs (countercount-generic.toml)",
              where="interventions (paired deltas)"),
    PaperItem("countercount", "Figure 18", "blur, MCQ, remaining models", "countercount",
              check=lambda f: f.has_arm_text("blur"), needs="needs blur runs", where="interventions (paired deltas)"),
    PaperItem("countercount", "Figure 19", "blur, OE, all models", "countercount",
              check=lambda f: f.has_arm_text("blur"), needs="needs blur runs", where="interventions (paired deltas)"),
    PaperItem("countercount", "Figure 20", "blur sweep over radius and feathering (Qwen3-VL-8B)", "countercount",
              check=lambda f: f.has_arm_text("blur_radius") or f.has_arm_text("feather"),
              needs="needs the blur sweep (countercount-blur-sweep.toml)",
              where="scores per blur setting"),
    PaperItem("countercount", "Figure 21", "humans vs models with and without the cue", "human",
              where="human rows (paper values); model deltas: CounterCount interventions"),
    PaperItem("countercount", "Figure 22", "cue, MCQ, remaining models", "countercount",
              check=lambda f: f.has_arm_text("cue"), needs="needs cue runs", where="interventions (paired deltas)"),
    PaperItem("countercount", "Figure 23", "cue, OE, all models", "countercount",
              check=lambda f: f.has_arm_text("cue"), needs="needs cue runs", where="interventions (paired deltas)"),
    PaperItem("countercount", "Figure 24", "thinking, OE", "countercount",
              check=lambda f: f.has_arm_text("think"), needs="needs thinking runs", where="interventions (paired deltas)"),
    PaperItem("countercount", "Figure 25", "attention analysis, OE", reason=_ATTN),
    PaperItem("countercount", "Figure 26", "figure", reason=NO_TEXT),
    PaperItem("countercount", "Figure 27", "attention modulation, MCQ, remaining models", reason=_ATTN),
    PaperItem("countercount", "Figure 28", "attention modulation, OE", reason=_ATTN),
    PaperItem("countercount", "Figure 29", "qualification images of the human study", reason="human study: paper values only"),
    PaperItem("countercount", "Figure 30", "annotation interface of the human study", reason="human study: paper values only"),
)

PAPER_MAP: tuple[PaperItem, ...] = FINGER + CVB + CC
"""Every table and figure of the three papers."""


def _dataset_name(d: str) -> str:
    """A dataset's battery name, or a folder's last component."""
    text = str(d).rstrip("/\\")
    return re.split(r"[\\/]", text)[-1] if ("/" in text or "\\" in text) else text


def facts_from(
    anchors: Iterable[str], episodes: pd.DataFrame | None, *, simulated: bool = False
) -> RunFacts:
    """The facts of one audit: the report's anchors and the episodes table's tasks, datasets
    and arms (empty without an episodes table)."""
    ep = episodes if episodes is not None else pd.DataFrame()

    def col(name: str) -> frozenset[str]:
        return frozenset(str(v) for v in ep[name].dropna().unique()) if name in ep.columns else frozenset()

    return RunFacts(frozenset(anchors), col("task"), col("dataset"), col("arm"), simulated)


@dataclass(frozen=True)
class MapRow:
    paper: str
    item: str
    content: str
    anchor: str | None
    """The anchor to link to, or None when the report does not have it."""
    status: str
    """Where to look (with an anchor), or why it is not there."""


def paper_map_rows(facts: RunFacts) -> list[MapRow]:
    """The map evaluated against one audit."""
    rows = []
    for it in PAPER_MAP:
        if it.anchor is None:
            rows.append(MapRow(it.paper, it.item, it.content, None, it.reason))
        elif it.anchor in facts.anchors and (it.check is None or it.check(facts)):
            rows.append(MapRow(it.paper, it.item, it.content, it.anchor, it.where))
        else:
            rows.append(MapRow(it.paper, it.item, it.content, None, it.needs))
    return rows


def _title(paper: str) -> str:
    return dict(PAPERS)[paper]


def paper_map_html(facts: RunFacts) -> str:
    """The report's "Paper map" section: one table per paper, each item linked to its anchor
    or with the reason it is not in this report."""
    rows = paper_map_rows(facts)
    parts = [
        '<section id="paper-map" data-nav="Paper map"><h2>Paper map</h2><p class="note">Every '
        "table and figure of the three papers: a link to where this report has it, or why it is "
        "not here. Items the report can hold appear once the runs they need are in the audited "
        "folder.</p>"
    ]
    for key, title in PAPERS:
        mine = [r for r in rows if r.paper == key]
        found = sum(r.anchor is not None for r in mine)
        parts.append(f'<details open><summary><h3 id="paper-map-{key}">{html.escape(title)} ({found} of '
                     f"{len(mine)} here)</h3></summary>")
        body = []
        for r in mine:
            item = html.escape(r.item)
            if r.anchor is not None:
                where = f'<a href="#{html.escape(r.anchor)}">{html.escape(_anchor_label(r.anchor))}</a>'
                if r.status:
                    where += f" — {html.escape(r.status)}"
            else:
                where = f'<span class="missing">{html.escape(r.status)}</span>'
            body.append(f'<tr><td>{item}</td><td class="long">{html.escape(r.content)}</td>'
                        f'<td class="long">{where}</td></tr>')  # fmt: skip
        parts.append(
            '<div class="table-wrap full"><table class="paper-map"><thead><tr><th>item</th><th>content</th>'
            f"<th>in this report</th></tr></thead><tbody>{''.join(body)}</tbody></table></div></details>"
        )
    parts.append("</section>")
    return "".join(parts)


ANCHOR_LABELS: Mapping[str, str] = {
    "summary": "Summary", "capacity": "Capacity profile", "contrasts": "Arm contrasts",
    "fig-tau_sensitivity": "Tau sensitivity", "range": "Counting range", "p-order_effect": "Order irrelevance",
    "p-tags_vs_direct": "Tags vs direct", "p-perturbation": "Tag-perturbation probe",
    "thinking-off": "Thinking-off control", "p-lattice": "Lattice control", "viewer": "Trajectory viewer",
    "fig-tag_gain": "Gain from tagging", "fsc-bins": "FSC-147 by count bin", "countvideo": "CountVideoBench",
    "cv-class-count": "EM by count and class", "human": "Human baselines", "countercount": "CounterCount",
    "cf-mean": "Cross-model means",
}  # fmt: skip


def _anchor_label(anchor: str) -> str:
    return ANCHOR_LABELS.get(anchor, anchor)


_ID_RE = re.compile(r'\sid="([^"]+)"')


def report_anchors(page: str) -> set[str]:
    """Every ``id`` of an HTML page."""
    return set(_ID_RE.findall(page))


def audit_facts(audit_dir: Path) -> RunFacts:
    """The facts of an audit folder: ``report.html``'s anchors and ``episodes.csv``'s columns."""
    audit_dir = Path(audit_dir)
    report = audit_dir / "report.html"
    anchors = report_anchors(report.read_text(encoding="utf-8")) if report.is_file() else set()
    episodes = None
    path = audit_dir / "episodes.csv"
    if path.is_file():
        wanted = {"task", "dataset", "arm", "simulated"}
        episodes = pd.read_csv(path, usecols=lambda c: c in wanted, dtype=str)
    simulated = bool(episodes is not None and "simulated" in episodes.columns
                     and episodes["simulated"].astype(str).str.lower().eq("true").any())  # fmt: skip
    return facts_from(anchors, episodes, simulated=simulated)


def paper_map_text(audit_dir: Path, papers: Sequence[str] | None = None) -> str:
    """The paper map of an audit folder as plain text: one line per table and figure,
    ``report.html#anchor`` where the report has it, else the reason (``papers``: only these
    keys of :data:`PAPERS`)."""
    facts = audit_facts(Path(audit_dir))
    rows = paper_map_rows(facts)
    lines = []
    if not facts.anchors:
        lines.append(f"(no report.html in {Path(audit_dir).name}: every item reads as missing)")
    if facts.simulated:
        lines.append("SIMULATED: the audited episodes were answered by a simulated model")
    width = max(len(r.item) for r in rows)
    for key, title in PAPERS:
        if papers is not None and key not in papers:
            continue
        mine = [r for r in rows if r.paper == key]
        found = sum(r.anchor is not None for r in mine)
        lines.append(f"{title}: {found} of {len(mine)} items in the report")
        for r in mine:
            if r.anchor is not None:
                where = f"report.html#{r.anchor}" + (f" ({r.status})" if r.status else "")
            else:
                where = f"-- {r.status}"
            lines.append(f"  {r.item:<{width}}  {r.content}: {where}")
    return "\n".join(lines)


def items(paper: str | None = None) -> Sequence[PaperItem]:
    """The map's items, of one paper or all."""
    return [it for it in PAPER_MAP if paper is None or it.paper == paper]
