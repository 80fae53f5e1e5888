"""End to end through the real loop: the audit scores the oracle perfectly and recovers the
noisy-pointer's injected omission, duplicate, phantom and slip rates within sampling error."""

from __future__ import annotations

import math

import pytest

from countgym.analysis import load_episodes, summarize
from countgym.runner import CellSpec, run_cell

pytestmark = pytest.mark.slow  # two full DotArrays main batteries through the tag loop

RATES = {"sigma": 3.0, "omission": 0.12, "duplicate": 0.06, "phantom": 0.07, "slip": 0.2}


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("recovery")
    for agent, opts in (("oracle", {}), ("noisy-pointer", RATES)):
        spec = CellSpec(dataset="dotarrays-main", agent=agent, agent_options=opts, env_options={"tools": ["tag"]})
        res = run_cell(spec, out, progress=False)
        assert res.errors == 0
    df = summarize(load_episodes([out]))
    return {row["arm"]: row for row in df.to_dict("records")}


def test_oracle_is_perfect(summary) -> None:
    o = summary["oracle"]
    assert o["em"] == 1.0 and o["mae"] == 0.0 and o["coverage"] == 1.0
    assert o["on_target_per100"] == 100.0
    assert o["duplicate_per100"] == o["phantom_per100"] == o["omission_per100"] == 0.0
    assert o["cardinality_consistency"] == 1.0 and o["pointing_error"] < 0.1  # oracle points are rounded to 0.1 normalised units


def within(observed_per100: float, p: float, n: int, k: float = 4.0) -> bool:
    se = 100 * math.sqrt(p * (1 - p) / n)
    return abs(observed_per100 - 100 * p) <= k * se


def test_noisy_pointer_rates_recovered(summary) -> None:
    s = summary["noisy-pointer"]
    n = int(s["n_objects"])
    assert n == 3684  # objects in the 216-image main battery
    assert within(s["omission_per100"], RATES["omission"], n)
    assert within(s["duplicate_per100"], (1 - RATES["omission"]) * RATES["duplicate"], n)
    assert within(s["phantom_per100"], RATES["phantom"], n)
    assert within(s["on_target_per100"], 1 - RATES["omission"], n)
    assert abs(s["cardinality_consistency"] - (1 - RATES["slip"])) < 4 * math.sqrt(0.2 * 0.8 / 216)
    # Rayleigh median of a 2-D Gaussian with sigma 3 per axis, in thousandths of the side.
    assert s["pointing_error"] == pytest.approx(3.0 * math.sqrt(2 * math.log(2)), rel=0.15)
