"""A study's reports know each other: the index page lists them, each report links its siblings,
and a paper a report holds no runs of points to the sibling that has them."""

from __future__ import annotations

from pathlib import Path

from countgym.analysis.study_index import StudyReport, link_sibling_reports, write_study_index


def _report(folder: Path) -> StudyReport:
    folder.mkdir(parents=True)
    (folder / "report.html").write_text(
        "<html><body><header></header><main>"
        + "".join(f'<details open><summary><h3 id="paper-map-{k}">{k} (0 of 3 here)</h3></summary></details>'
                  for k in ("finger", "countvideobench", "countercount"))
        + "</main></body></html>"
    )
    paper = {"finger-audit": "finger", "countvideo-audit": "countvideobench", "cc-audit": "countercount"}[folder.name]
    return StudyReport(folder, paper)


def test_siblings_are_linked_once_and_papers_point_to_their_report(tmp_path: Path) -> None:
    reports = [_report(tmp_path / "runs" / n) for n in ("finger-audit", "countvideo-audit", "cc-audit")]
    index = tmp_path / "index.html"
    assert link_sibling_reports(reports, index) == 3
    assert link_sibling_reports(reports, index) == 3  # again: still one line each
    video = (tmp_path / "runs" / "countvideo-audit" / "report.html").read_text()
    assert video.count('class="cg-siblings"') == 1
    assert '<a href="../../index.html">study index</a>' in video
    assert '<a href="../finger-audit/report.html">Give the Model a Finger report</a>' in video
    assert '<a href="../cc-audit/report.html">CounterCount report</a>' in video
    # The CounterCount and Finger sections of the video report's map point at their reports;
    # its own paper's section does not.
    assert video.count('class="cg-siblings-paper"') == 2
    cc_part = video.split('id="paper-map-countercount"', 1)[1]
    assert cc_part.split("</details>", 1)[0].count('href="../cc-audit/report.html#paper-map-countercount"') == 1
    own = video.split('id="paper-map-countvideobench"', 1)[1].split("</details>", 1)[0]
    assert "cg-siblings-paper" not in own


def test_index_lists_reports_and_escapes_text(tmp_path: Path) -> None:
    reports = [_report(tmp_path / "runs" / "finger-audit"), StudyReport(tmp_path / "runs" / "gone-audit", None)]
    page = write_study_index(tmp_path / "index.html", reports, title="study <1>", facts=["a & b"],
                             sections=[("Injected vs recovered", "model <script>x</script> 1.0/1.1")],
                             simulated=True).read_text()
    assert "<title>study &lt;1&gt;</title>" in page and "<p>a &amp; b</p>" in page
    assert "&lt;script&gt;" in page and "<script>x" not in page
    assert '<a href="runs/finger-audit/report.html">Give the Model a Finger</a>' in page
    assert "gone-audit (no report)" in page and "SIMULATED" in page
