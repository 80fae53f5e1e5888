"""``countgym rehearse``: every config of a folder under the simulated model, shared folders
audited once, injected vs recovered printed, offline-only datasets skipped with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from countgym.cli import main
from countgym.logs import iter_records


@pytest.fixture()
def configs(tmp_path: Path, tiny_dataset, tiny_countercount: Path) -> Path:
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "finger-a.toml").write_text(
        f'out = "runs/finger"\ndatasets = ["{tiny_dataset.root}", "fsc147:common"]\n'
        'arms = ["direct", "tag"]\nmodels = ["REPLACE:model-a", "REPLACE:model-b"]\nconcurrency = 2\n'
    )
    (folder / "finger-b.toml").write_text(
        f'out = "runs/finger"\ndatasets = ["{tiny_dataset.root}", "fsc147:ablation"]\n'
        'arms = ["tag"]\nmodels = ["REPLACE:model-a"]\nablations = [{}, { verify = false }]\n'
    )
    (folder / "countercount-a.toml").write_text(
        f'out = "runs/countercount"\ndatasets = ["{tiny_countercount}"]\narms = ["cf-mcq", "cf-oe"]\n'
        'models = ["REPLACE:model-c"]\n'
    )
    return folder


@pytest.mark.slow  # two shared folders run and audited (about 30 s idle, 2 min on a loaded machine)
def test_rehearse_runs_audits_and_compares(tmp_path: Path, configs: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("COUNTGYM_FSC147_ROOT", raising=False)
    out = tmp_path / "rehearsal"
    assert main(["rehearse", "--configs", str(configs), "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    # One line for the dataset that needs a download, however many configs name it.
    assert sum(line.startswith("skipped: fsc147") for line in text.splitlines()) == 1
    assert "2 datasets skipped (fsc147:common, fsc147:ablation)" in text
    finger, cc = out / "runs" / "finger", out / "runs" / "countercount"
    recs = list(iter_records(sorted(finger.glob("*.jsonl"))))
    # 4 + 2 cells on the tiny set (the shared tag cell of model-a runs once), 2 stimuli each.
    assert len(list(finger.glob("*.jsonl"))) == 5 and len(recs) == 10
    assert all(r.simulated is not None and r.simulated["source"] == "built-in" for r in recs)
    assert len(list(iter_records(sorted(cc.glob("*.jsonl"))))) == 2 * 2
    for audit in (out / "runs" / "finger-audit", out / "runs" / "countercount-audit"):
        assert (audit / "report.html").is_file() and (audit / "summary.csv").is_file()
        assert f"{audit}: {audit / 'report.html'}" in text
    assert "injected/recovered per model" in text
    table = text.split("injected/recovered per model", 1)[1]
    for model in ("REPLACE:model-a", "REPLACE:model-b", "REPLACE:model-c"):
        assert model in table
    # One index page links both reports and holds the table; each report links its sibling.
    index = out / "index.html"
    assert "index of this rehearsal" in text and str(index) in text
    page = index.read_text()
    assert 'href="runs/finger-audit/report.html"' in page and 'href="runs/countercount-audit/report.html"' in page
    assert "Injected vs recovered" in page and "REPLACE:model-c" in page
    finger_report = (out / "runs" / "finger-audit" / "report.html").read_text()
    assert 'href="../countercount-audit/report.html">CounterCount report</a>' in finger_report
    assert 'href="../../index.html">study index</a>' in finger_report
    assert 'href="../countercount-audit/report.html#paper-map-countercount"' in finger_report
    cc_report = (out / "runs" / "countercount-audit" / "report.html").read_text()
    assert 'href="../finger-audit/report.html">Give the Model a Finger report</a>' in cc_report
    # What the design can detect: the CounterCount MCQ bias rate's half-width is the audit's own.
    import pandas as pd

    scores = pd.read_csv(out / "runs" / "countercount-audit" / "countercount" / "cf_scores.csv")
    mcq = scores[(scores["format"] == "mcq") & (scores["intervention"] == "baseline")].iloc[0]
    half = 100 * (mcq["bias_rate_high"] - mcq["bias_rate_low"]) / 2
    detect = text.split("what this design can detect", 1)[1]
    row = next(x for x in detect.splitlines() if "bias rate, MCQ (baseline)" in x)
    expected = "no interval (too few items)" if half != half else f"+/-{half:.1f} pp"  # NaN: no CI at small n
    assert expected in row and "39.1 %" in row


def test_rehearse_bad_profile_is_one_line(tmp_path: Path, configs: Path, capsys) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text("[default]\nomission = -1\n")
    assert main(["rehearse", "--configs", str(configs), "--out", str(tmp_path / "o"), "--profile", str(prof)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "omission" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("given", ["../escape", "runs/../../escape", "..", ".", "/abs/..", "/"])
def test_a_config_out_that_leaves_out_is_refused_before_any_work(tmp_path: Path, configs: Path, capsys,
                                                                  given: str) -> None:
    (configs / "zz-climbs.toml").write_text(f'out = "{given}"\ndatasets = ["dotarrays"]\narms = ["direct"]\n'
                                            'models = ["REPLACE:m"]\n')
    out = tmp_path / "box" / "rehearsal"
    assert main(["rehearse", "--configs", str(configs), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zz-climbs.toml" in err and "leaves the rehearsal's --out" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["configs"]  # nothing written anywhere


def test_a_config_out_stays_under_out() -> None:
    from countgym.rehearse import run_folder

    out, cfg = Path("/r/out"), Path("c.toml")
    assert run_folder(out, "runs/finger", cfg) == out / "runs" / "finger"
    assert run_folder(out, "runs/x/../finger", cfg) == out / "runs" / "finger"
    assert run_folder(out, "/data/runs/finger", cfg) == out / "finger"  # absolute: re-rooted
    for bad in ("..", "../x", "a/../../x", "/data/.."):
        with pytest.raises(Exception, match="leaves the rehearsal's --out"):
            run_folder(out, bad, cfg)
