"""The audit folder and the HTML report: files, escaping, the viewer, and a real headless browser.

Episodes are run through the real tool loop (``run_cell``) on the tiny dataset by a policy
whose replies carry markup, so the report must show ``<script>alert(1)</script>`` as text.
The browser tests need Debian's ``chromium`` (``apt-get install -y chromium``) and are
skipped with that reason when it is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from countgym.analysis import (
    ViewerOptions,
    draw_audit_overlay,
    report_tables,
    write_audit,
    write_audit_files,
)
from countgym.analysis.overlay import OVERLAY_COLORS
from countgym.analysis.report import esc, json_for_script
from countgym.runner import CellSpec, run_cell
from countgym.stimulus import Dataset

MARKUP = "<script>alert(1)</script>"
MODEL = "vlm<i>x</i>"


class MarkupTagger:
    """Tags four points (normalised 0-1000), then answers; its first reply carries markup."""

    def __init__(self, answer: int = 4) -> None:
        self.answer = answer
        self.calls = 0

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        self.calls = 0

    def act(self, observation: dict[str, Any]) -> str:
        self.calls += 1
        if self.calls == 1:
            return (f'I see {MARKUP} & "quoted" dots.\n'
                    '{"tool":"tag","points":[[130,130],[391,260],[651,781],[911,911]]}')  # fmt: skip
        return f'{{"tool":"answer","count":{self.answer}}}'


@pytest.fixture(scope="module")
def runs(tiny_dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    for agent, answer in (("tagger-a", 4), ("tagger-b", 2)):
        spec = CellSpec(dataset=str(tiny_dataset.root), agent=agent, model=MODEL,
                        env_options={"tools": ["tag"]})  # fmt: skip
        res = run_cell(spec, out, policy_factory=lambda a=answer: MarkupTagger(a),
                       dataset=tiny_dataset, progress=False)  # fmt: skip
        assert res.errors == 0, res.error_messages
    return out


@pytest.fixture(scope="module")
def audit_dir(runs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("audit")
    write_audit_files([runs], out, n_resamples=200)
    return out


# --- files --------------------------------------------------------------------------------------


def test_audit_folder_files(audit_dir: Path) -> None:
    for name in ("episodes", "summary", "contrasts", "accuracy_by_n", "departures"):
        assert (audit_dir / f"{name}.csv").is_file(), name
    figs = sorted(p.name for p in (audit_dir / "figures").glob("*.png"))
    assert {"arm_comparison.png", "capacity_profile.png", "tau_sensitivity.png"} <= set(figs)
    for f in figs:
        with Image.open(audit_dir / "figures" / f) as im:
            assert im.size[0] > 300
    summary = pd.read_csv(audit_dir / "summary.csv")
    for col in ("r80", "r80_ci_low", "r80_ci_high", "r80_censored", "support_size",
                "prediction_perplexity"):  # fmt: skip
        assert col in summary.columns
    contrasts = pd.read_csv(audit_dir / "contrasts.csv")
    em = contrasts[contrasts["metric"] == "exact_match_score"].iloc[0]
    # tagger-a answers 4 (right on "four" only), tagger-b answers 2 (right on "two" only).
    assert (em["arm_a"], em["arm_b"], em["n_pairs"]) == ("tagger-a", "tagger-b", 3)
    assert em["difference"] == 0.0 and not em["ci_solid"]


def test_write_audit_keeps_its_return_value(runs: Path, tmp_path: Path) -> None:
    out = write_audit([runs], tmp_path, n_resamples=50, report=False)
    assert set(out) == {"episodes", "summary"}
    assert (tmp_path / "contrasts.csv").is_file() and not (tmp_path / "report.html").exists()


def test_report_tables_match_the_csvs(runs: Path, audit_dir: Path) -> None:
    tables = report_tables([runs], n_resamples=200)
    assert {"episodes", "summary", "accuracy_by_n", "contrasts", "departures"} <= set(tables)
    assert all(isinstance(t, pd.DataFrame) for t in tables.values())
    pd.testing.assert_frame_equal(
        tables["contrasts"].reset_index(drop=True),
        pd.read_csv(audit_dir / "contrasts.csv"),
        check_dtype=False,
    )


# --- HTML safety --------------------------------------------------------------------------------


def test_json_for_script_cannot_close_the_script() -> None:
    text = json_for_script({"reply": "</script><script>alert(1)</script> & é"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text)["reply"] == "</script><script>alert(1)</script> & é"
    assert esc('<b a="1">') == "&lt;b a=&quot;1&quot;&gt;"


def test_report_is_self_contained_and_escaped(audit_dir: Path) -> None:
    page = (audit_dir / "report.html").read_text(encoding="utf-8")
    assert "<script>alert" not in page and "<i>x</i>" not in page
    assert "vlm&lt;i&gt;x&lt;/i&gt;" in page  # the model name, escaped, in the tables
    # Nothing is fetched: no external URL, every src/href is a data URI or an anchor.
    assert "http://" not in page and "https://" not in page
    for attr in re.findall(r'(?:src|href)="([^"]*)"', page):
        assert attr.startswith(("data:", "#")), attr
    assert page.count('src="data:image/png;base64,') >= 3
    # The viewer data sits in one JSON script whose text parses back to the replies.
    m = re.search(r'<script type="application/json" id="cg-viewer-data">(.*?)</script>', page, re.S)
    assert m is not None
    data = json.loads(m.group(1))
    assert len(data["episodes"]) == 6
    first = data["episodes"][0]
    assert MARKUP in first["steps"][0]["reply"]
    assert len(first["frames"]) == len(first["steps"]) + 1
    assert first["overlay"].startswith("data:image/jpeg;base64,")


@pytest.mark.slow
def test_viewer_caps(runs: Path, tmp_path: Path) -> None:
    files = write_audit_files([runs], tmp_path / "a", n_resamples=50,
                              viewer=ViewerOptions(max_episodes=2))  # fmt: skip
    assert (files.viewer_shown, files.viewer_total) == (2, 6)
    assert "Showing 2 of 6 episodes (viewer cap: 2 episodes" in files.report.read_text()
    files = write_audit_files([runs], tmp_path / "b", n_resamples=50,
                              viewer=ViewerOptions(max_bytes=1))  # fmt: skip
    assert files.viewer_shown == 1
    assert "image budget" in files.report.read_text()
    with pytest.raises(ValueError, match="jpeg_quality"):
        write_audit_files([runs], tmp_path / "c", viewer=ViewerOptions(jpeg_quality=0))


@pytest.mark.slow
def test_cli_audit_writes_the_report(runs: Path, tmp_path: Path) -> None:
    from countgym.cli import main

    assert main(["audit", str(runs), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "report.html").stat().st_size > 10_000
    assert (tmp_path / "contrasts.csv").is_file()


def test_overlay_colours() -> None:
    img = np.full((768, 768, 3), 255, dtype=np.uint8)
    points = [(100.0, 100.0), (300.0, 300.0)]
    tags = [(100.0, 100.0), (100.0, 160.0), (600.0, 600.0)]  # on-target, duplicate, phantom
    im, m = draw_audit_overlay(img, tags, points, max_side=768)
    assert m.tag_label == ("on_target", "duplicate", "phantom") and m.omitted == (1,)
    r = 0.014 * 768
    px = im.load()
    assert px[round(100 + r - 1), 100] == OVERLAY_COLORS["on_target"]
    assert px[round(100 + r - 1), 160] == OVERLAY_COLORS["duplicate"]
    assert px[round(600 + r - 1), 600] == OVERLAY_COLORS["phantom"]
    assert px[round(300 + 1.4 * r - 1), 300] == OVERLAY_COLORS["omission"]
    assert px[300, 300] == (255, 255, 255)  # the omission circle is hollow


# --- a real browser -----------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium not installed (Debian: apt-get install -y chromium); browser checks skipped",
)


def _chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    args = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
        "--hide-scrollbars", *extra, url,
    ]  # fmt: skip
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@needs_chromium
def test_report_renders_in_a_headless_browser(audit_dir: Path, tmp_path: Path) -> None:
    res = _chromium((audit_dir / "report.html").as_uri(), tmp_path / "profile", "--dump-dom")
    dom = res.stdout
    assert res.returncode == 0 and "</html>" in dom, res.stderr[-2000:]
    # Tables and figures.
    assert 'id="summary-table"' in dom and "tagger-a" in dom and "tagger-b" in dom
    assert 'id="contrasts-table"' in dom
    assert len(re.findall(r'<img src="data:image/png;base64,', dom)) >= 3
    # The viewer's script ran: the first episode is rendered with its images and its reply.
    m = re.search(r'<div id="cg-episode" class="viewer-episode" data-episode="([^"]+)">', dom)
    assert m is not None, "the viewer did not render an episode"
    assert m.group(1).endswith("/r0")
    assert dom.count('<div class="step') >= 2
    # What the model was asked: the first observation's text, above the steps.
    assert "what the model was asked (first observation)" in dom
    assert "Count the dots in this image." in dom or "Count the " in dom.split('class="asked"', 1)[1]
    assert len(re.findall(r'<img src="data:image/jpeg;base64,', dom)) >= 3
    assert len(re.findall(r"<option ", dom)) == 6
    # The markup in the reply is shown as text, never as an element.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "<script>alert" not in dom
    assert "vlm&lt;i&gt;x&lt;/i&gt;" in dom and "<i>x</i>" not in dom


@pytest.mark.slow
@needs_chromium
def test_report_screenshot(audit_dir: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    res = _chromium((audit_dir / "report.html").as_uri(), tmp_path / "profile",
                    f"--screenshot={shot}", "--window-size=1400,2000")  # fmt: skip
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    with Image.open(shot) as im:
        assert im.size == (1400, 2000)
        # A rendered page, not a blank one: plenty of non-white pixels.
        gray = np.asarray(im.convert("L"))
        assert (gray < 200).mean() > 0.01
