"""One model name run at two endpoints into one folder, then ``countgym audit``, as a user does
it (two local test servers)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from countgym.cli import main
from countgym.testing.server import TestServer


@pytest.mark.slow
def test_same_model_at_two_endpoints_audits_as_two_models(tiny_dataset, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    runs, audit = tmp_path / "runs", tmp_path / "audit"
    with TestServer() as exact, TestServer(noise=2.0, seed=3) as noisy:
        for srv, user in ((exact, ""), (noisy, "someone:SECRETKEY@")):
            base = srv.base_url.replace("http://", f"http://{user}")
            for arm in ("direct", "tag"):
                assert main(["run", "--agent", arm, "--model", "openai/x", "--agent-option", f"api_base={base}",
                             "--out", str(runs), "--no-progress", "--data", str(tiny_dataset.root)]) == 0
    capsys.readouterr()
    assert main(["audit", str(runs), "--out", str(audit), "--no-judge", "--resamples", "20",
                 "--viewer-episodes", "0"]) == 0
    out = capsys.readouterr().out
    hosts = sorted(f"openai/x @127.0.0.1:{srv.port}" for srv in (exact, noisy))
    summary = pd.read_csv(audit / "summary.csv")
    assert sorted(summary.loc[summary["arm"] == "direct", "model"]) == hosts  # today: one pooled row
    contrasts = pd.read_csv(audit / "contrasts.csv")
    assert sorted(contrasts["model"].unique()) == hosts and (contrasts["n_pairs"] <= 3).all()
    exact_row = summary[(summary["model"] == f"openai/x @127.0.0.1:{exact.port}") & (summary["arm"] == "tag")]
    assert float(exact_row["em"].iloc[0]) == 1.0
    for f in (*audit.glob("*.csv"), audit / "report.html"):
        assert "SECRETKEY" not in f.read_text(encoding="utf-8")
    printed = [line.split()[2:4] for line in out.splitlines() if line.strip().startswith(tiny_dataset.root.name[:6])]
    assert len(printed) == 4 and len({" ".join(p) for p in printed}) == 2  # two distinct model cells
