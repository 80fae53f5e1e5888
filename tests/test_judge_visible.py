"""The CounterCount judge is visible: whether it ran, how many replies needed it, how they were
counted, and the command that judges what is left; under --simulate the judge path runs."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from countgym.analysis.extraction import Resolution, judge_command
from countgym.cli import main

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_summary_off_says_how_many_and_the_command() -> None:
    res = Resolution([], judge_mode="off", cf_replies=8, judge_needed=3, judge_unresolved=3)
    text = res.judge_summary(["countgym", "audit", "runs/cc", "--out", "audit", "--no-judge"])
    assert text == ("off (--no-judge); 3 of 8 CounterCount replies named several numbers and needed it: "
                    "0 judged (scored as the number the judge read), 3 counted as no answer for want of a "
                    "judge; judge them with: countgym audit runs/cc --out audit --judge same")
    assert res.provenance()["judge"].startswith("off (--no-judge); 3 of 8")
    ran = Resolution([], judge_mode="same", cf_replies=8, judge_needed=3, judge_unresolved=0)
    assert "ran: each run's own model" in ran.judge_summary() and "3 judged" in ran.judge_summary()
    assert Resolution([]).judge_summary() is None  # no CounterCount replies: no line


def test_judge_command_replaces_judge_flags() -> None:
    cmd = ["countgym", "audit", "my runs", "--out", "o", "--judge", "m", "--judge-option", "x=1"]
    assert judge_command(cmd) == "countgym audit 'my runs' --out o --judge same"
    assert judge_command(None, endpoint=True) == (
        "countgym audit RUNS --out OUT --judge same --judge-option api_base=URL")


def test_countercount_configs_mention_the_judge() -> None:
    files = sorted(CONFIGS.glob("countercount-*.toml"))
    assert files
    for f in files:
        header = "".join(line for line in f.read_text().splitlines(keepends=True) if line.startswith("#"))
        assert "--judge" in header, f.name


@pytest.mark.slow  # two CounterCount runs under --simulate and three audits (about 30 s)
def test_simulated_hedges_are_judged_and_counted(tmp_path: Path, tiny_countercount: Path, capsys) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text("[default]\nhedge = 1.0\ncanonical = 0.0\n")  # every reply names two numbers
    runs = tmp_path / "runs"
    assert main(["run", "--data", str(tiny_countercount), "--agent", "cf-oe", "--model", "REPLACE:vlm",
                 "--simulate", str(prof), "--out", str(runs), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "judge: 4 replies named several numbers: 0 judged, 4 counted as no answer" in printed

    # The default audit: the simulated model judges its own replies (the paper's setting).
    assert main(["audit", str(runs), "--out", str(tmp_path / "a"), "--viewer-episodes", "0",
                 "--resamples", "50"]) == 0
    scores = pd.read_csv(tmp_path / "a" / "countercount" / "cf_scores.csv").iloc[0]
    assert (scores.n_judge_needed, scores.n_judged, scores.n_unjudged) == (4, 4, 0)
    assert scores.factual_accuracy == 1.0 and scores.cf_accuracy == 1.0  # the judge read the last number
    html = (tmp_path / "a" / "report.html").read_text()
    header = re.search(r"judge: <b>(.*?)</b>", html)
    assert header and header.group(1).startswith("ran: each run&#x27;s own model")
    assert "4 of 4 CounterCount replies named several numbers and needed it: 4 judged" in header.group(1)
    assert html.count('class="note judge-caption"') >= 2  # under every CounterCount table

    # Judge off: the same replies count as no answer, the report says so and how to judge them.
    out = tmp_path / "b"
    assert main(["audit", str(runs), "--out", str(out), "--no-judge", "--viewer-episodes", "0",
                 "--resamples", "50"]) == 0
    scores = pd.read_csv(out / "countercount" / "cf_scores.csv").iloc[0]
    assert (scores.n_judge_needed, scores.n_judged, scores.n_unjudged) == (4, 0, 4)
    assert scores.factual_accuracy == 0.0
    html = (out / "report.html").read_text()
    assert "4 counted as no answer for want of a judge; judge them with: countgym audit " in html
    assert f"{runs} --out {out} --judge same" in html
