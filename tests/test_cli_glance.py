"""``countgym run``, ``sweep`` and ``audit`` end with the results table (real runs against the
local test server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from countgym.analysis.glance import WIDTH
from countgym.cli import main
from countgym.testing.server import TestServer


def _row(out: str, *cells: str) -> list[str]:
    """The table line whose first cells are ``cells``, split into columns."""
    for line in out.splitlines():
        parts = line.split()
        if parts[: len(cells)] == list(cells):
            return parts
    raise AssertionError(f"no row {cells} in:\n{out}")


def _header(out: str, first: str) -> list[str]:
    return _row(out, first)


@pytest.mark.slow
def test_run_then_audit_print_the_table(tiny_dataset, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    runs = tmp_path / "runs"
    with TestServer() as srv:
        args = ["--model", "openai/blob", "--agent-option", f"api_base={srv.base_url}", "--out", str(runs),
                "--no-progress", "--data", str(tiny_dataset.root)]
        assert main(["run", "--agent", "tag", *args]) == 0
        run_out = capsys.readouterr().out
        assert main(["run", "--agent", "direct", *args]) == 0
        capsys.readouterr()
    head = _header(run_out, "dataset")
    assert head == ["dataset", "arm", "model", "n", "err", "EM", "MAE", "R80", "on-tgt", "dup", "phant", "omit"]
    # The test server tags every disc: 3 of 3 exact, every object on target, no duplicate; the
    # tiny set counts as a main battery (no `set`), all correct up to n = 10: R80 censored at 10.
    row = _row(run_out, tiny_dataset.root.name, "tag", "openai/blob")
    assert row[3:] == ["3", "0", "1.00", "0.00", "10+", "100.0", "0.0", "0.0", "0.0"]
    assert f"countgym audit {runs} --out {runs}-audit" in run_out.splitlines()[-1]
    assert all(len(line) <= WIDTH for line in run_out.splitlines()[1:-1])  # paths aside: the table

    audit = tmp_path / "audit"
    assert main(["audit", str(runs), "--out", str(audit), "--no-judge", "--resamples", "50",
                 "--viewer-episodes", "0"]) == 0
    out = capsys.readouterr().out
    assert _row(out, tiny_dataset.root.name, "tag", "openai/blob") == row
    direct = _row(out, tiny_dataset.root.name, "direct", "openai/blob")
    assert direct[3:8] == ["3", "0", "1.00", "0.00", "10+"] and direct[8:] == ["-"] * 4  # no tags: no audit
    assert out.splitlines()[-1].startswith(f"full tables (all columns, 95 % CIs): {audit / 'summary.csv'}")


def test_countercount_and_video_cells_show_their_headline_metrics(
    tiny_countercount: Path, tiny_countvideo: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    runs = tmp_path / "runs"
    with TestServer() as srv:
        common = ["--model", "openai/blob", "--agent-option", f"api_base={srv.base_url}", "--out", str(runs),
                  "--no-progress"]
        assert main(["run", "--data", str(tiny_countercount), "--agent", "cf-oe", *common]) == 0
        cf_out = capsys.readouterr().out
        assert main(["run", "--data", str(tiny_countvideo), "--agent", "video-p1", *common]) == 0
        video_out = capsys.readouterr().out
    assert _header(cf_out, "model") == ["model", "format", "intervention", "n", "err", "factual", "CF", "bias"]
    cf = _row(cf_out, "openai/blob", "oe", "baseline")
    assert cf[3:5] == ["4", "0"] and all(0 <= float(x) <= 1 for x in cf[5:])
    assert "image task" not in cf_out  # a CounterCount cell gets no image-task EM/R80 table
    assert _header(video_out, "dataset") == ["dataset", "arm", "model", "n", "err", "EM", "MAE", "|S|", "PP"]
    video = _row(video_out, tiny_countvideo.name, "video-p1", "openai/blob")
    assert video[3:5] == ["2", "0"] and float(video[7]) >= 1


def test_long_names_keep_the_table_narrow(tmp_path: Path) -> None:
    import pandas as pd

    from countgym.analysis.glance import Glance, render

    name = "/very/long/folder/" + "x" * 80
    summary = pd.DataFrame([{
        "dataset": name, "arm": "tag[budget=12;verify=False;order=reverse]", "model": "openai/" + "m" * 60,
        "scope": "dataset", "n_episodes": 1234, "errors": 5, "em": 0.123456, "mae": 12.3456, "r80": 17.0,
        "r80_censored": False, "n_audited": 1200, "on_target_per100": 93.456, "duplicate_per100": 1.0,
        "phantom_per100": 2.0, "omission_per100": 5.5,
    }])
    text = render(Glance(summary, {}), where="w")
    lines = text.splitlines()
    assert all(len(line) <= WIDTH for line in lines), text
    (row,) = [line.split() for line in lines if "1234" in line]
    assert row[3:] == ["1234", "5", "0.12", "12.35", "17", "93.5", "1.0", "2.0", "5.5"]
    # Names too long for their column are keys, spelled out whole (the folder's name, not its
    # path) in the key table under the table.
    assert row[:3] == ["D1", "A1", "M1"]
    keys = {parts[0]: parts[2] for parts in (line.split(None, 2) for line in lines) if parts[0] in row[:3]
            and len(parts) == 3 and parts[1].endswith(":")}
    assert keys == {"D1": "x" * 80, "A1": "tag[budget=12;verify=False;order=reverse]", "M1": "openai/" + "m" * 60}


def test_sweep_ends_with_the_table_of_all_its_cells(tiny_dataset, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    with TestServer() as srv:
        cfg = tmp_path / "s.toml"
        cfg.write_text(f'out = "{tmp_path / "runs"}"\ndatasets = ["{tiny_dataset.root}"]\n'
                       f'arms = ["tag", "direct", "oracle"]\nmodels = ["openai/blob"]\n'
                       f'[model_options."openai/blob"]\napi_base = "{srv.base_url}"\n')
        assert main(["sweep", str(cfg), "--no-progress"]) == 0
    out = capsys.readouterr().out
    name = tiny_dataset.root.name
    assert _row(out, name, "tag", "openai/blob")[3:8] == ["3", "0", "1.00", "0.00", "10+"]
    assert _row(out, name, "direct", "openai/blob")[3:5] == ["3", "0"]
    assert _row(out, name, "oracle", "oracle")[3:] == ["3", "0", "1.00", "0.00", "10+", "100.0", "0.0", "0.0",
                                                      "0.0"]
    assert out.splitlines()[-1].startswith("full tables, CIs and report: countgym audit")
