"""The rehearsal's injected-vs-recovered table: each row's n, 95 % CI and verdict."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from countgym.rehearse import MIN_VERDICT_ITEMS, comparison_checks, print_comparison
from countgym.testing.profiles import load_profiles


def _audit(tmp_path: Path, n_big: int, n_cf: int) -> tuple[Path, object]:
    prof = tmp_path / "p.toml"
    prof.write_text('[default]\nomission = 0.10\nduplicate = 0.0\nphantom = 0.0\ncanonical = 0.3\n'
                    'count_bias = -0.1\n[models."tiny"]\nomission = 0.10\n')
    d = tmp_path / "finger-audit"
    d.mkdir()
    rng = np.random.default_rng(0)
    rows = []
    for model, n_eps in (("big", n_big), ("tiny", 3)):
        for _ in range(n_eps):
            om = int(rng.binomial(20, 0.10)) if model == "big" else 10  # tiny: half omitted, far from 0.10
            rows.append({"model": model, "arm": "tag", "prompt": "tools", "task": "image", "audited": True,
                         "n_true": 20, "omission": om, "duplicate": 0, "phantom": 0, "pointing_error": np.nan,
                         "signed_error": np.nan})
        for i in range(n_eps):
            rows.append({"model": model, "arm": "direct", "prompt": "direct", "task": "image", "audited": False,
                         "n_true": 10, "omission": np.nan, "duplicate": np.nan, "phantom": np.nan,
                         "pointing_error": np.nan, "signed_error": -1.0 + (i % 3 - 1)})
    pd.DataFrame(rows).to_csv(d / "episodes.csv", index=False)
    (d / "countercount").mkdir()
    pd.DataFrame([{"model": "big", "bias_rate": 0.3, "n_cf": n_cf}]).to_csv(d / "countercount" / "cf_scores.csv",
                                                                          index=False)
    return d, load_profiles(prof)


def test_verdicts_recovered_outside_and_too_few(tmp_path: Path, capsys) -> None:
    d, profiles = _audit(tmp_path, n_big=60, n_cf=1)
    checks = {(c.model, c.metric): c for c in comparison_checks([d], profiles)}
    om = checks[("big", "omission/100")]
    assert om.n == 60 and om.low < 10.0 < om.high and om.verdict == "recovered"
    assert checks[("big", "MSE/n")].verdict == "recovered"  # mean signed error / n = -0.1 exactly
    tiny = checks[("tiny", "omission/100")]
    assert tiny.n == 3 and tiny.recovered == 50.0
    assert tiny.verdict == f"too few to tell (3 < {MIN_VERDICT_ITEMS} items)"
    bias = checks[("big", "bias rate")]  # one CF item: no interval, no verdict
    assert bias.n == 1 and np.isnan(bias.low) and bias.verdict.startswith("too few to tell")
    print_comparison([d], profiles, scale="quick")
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if line.startswith("audit "))
    assert head.split() == ["audit", "model", "metric", "injected", "recovered", "n", "95%", "CI", "verdict"]
    assert "--scale quick is too small to verify" in out and "tiny omission/100 (n 3)" in out
    assert "[1.00, 1.00]" not in out


def test_a_wrong_recovery_is_outside(tmp_path: Path) -> None:
    d, profiles = _audit(tmp_path, n_big=60, n_cf=50)
    ep = pd.read_csv(d / "episodes.csv")
    ep.loc[(ep["model"] == "big") & ep["audited"], "omission"] = 6  # 30 per 100, injected 10
    ep.to_csv(d / "episodes.csv", index=False)
    checks = {(c.model, c.metric): c for c in comparison_checks([d], profiles)}
    assert checks[("big", "omission/100")].verdict == "outside"
    assert checks[("big", "bias rate")].verdict == "recovered" and checks[("big", "bias rate")].n == 50
