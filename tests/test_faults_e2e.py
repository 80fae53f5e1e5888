"""A sweep against a faulty provider: every episode ends in the log (finished or with a recorded
error), retries absorb transient faults, and the API key never appears in any output."""

from __future__ import annotations

from pathlib import Path

import pytest

from countgym.analysis import write_audit
from countgym.logs import read_records
from countgym.sweep import load_config, run_sweep
from countgym.testing.server import TestServer

SECRET = "sk-test-NEVER-LOG-ME-4242"


@pytest.fixture
def faulty_server():
    faults = {"429": 0.08, "500": 0.08, "malformed": 0.05, "empty": 0.05, "drop": 0.05, "401": 0.03}
    with TestServer(faults=faults, seed=3, retry_after=0) as srv:
        yield srv


@pytest.mark.slow
def test_faulty_sweep_loses_nothing_and_leaks_no_key(faulty_server, tiny_dataset, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    cfg_path = tmp_path / "sweep.toml"
    cfg_path.write_text(f'''
out = "{tmp_path / 'runs'}"
datasets = ["{tiny_dataset.root}"]
arms = ["direct", "tag", "list"]
models = ["openai/blob"]
repeats = 4
concurrency = 4

[model_options."openai/blob"]
api_base = "{faulty_server.base_url}"
backoff_base_s = 0.01
backoff_max_s = 0.05
input_cost_per_token = 1e-6
output_cost_per_token = 2e-6
''')
    results = run_sweep(load_config(cfg_path), progress=False)
    assert [r.ran for r in results] == [12, 12, 12]
    recs = read_records([tmp_path / "runs"])
    assert len(recs) == 36 and len({(r.arm.name, r.stimulus_id, r.repeat) for r in recs}) == 36
    errors = [r for r in recs if r.end == "error"]
    finished = [r for r in recs if r.end != "error"]
    assert faulty_server.fault_counts and sum(faulty_server.fault_counts.values()) > 5
    assert finished and all(r.answer == r.truth.n for r in finished if r.end == "answer")
    assert all(r.error for r in errors)  # 401s are not retried: recorded, not raised
    assert any(s.cost for r in finished for s in r.steps)  # per-token prices give a cost
    paths = write_audit([tmp_path / "runs"], tmp_path / "audit")
    for p in [*(tmp_path / "runs").iterdir(), *paths.values()]:
        if p.is_file():
            assert SECRET not in p.read_text(errors="replace"), p


def test_key_passed_as_option_is_redacted_and_provider_logged(tiny_dataset, tmp_path: Path) -> None:
    from countgym.runner import CellSpec, run_cell

    with TestServer() as srv:
        spec = CellSpec(dataset=str(tiny_dataset.root), agent="tag", model="openai/blob",
                        agent_options={"api_base": srv.base_url, "api_key": SECRET})
        res = run_cell(spec, tmp_path, progress=False)
    assert res.errors == 0
    for p in tmp_path.iterdir():
        assert SECRET not in p.read_text(), p
    (rec, *_) = read_records([res.log])
    assert rec.arm.options["api_key"] == "<redacted>"
    assert rec.arm.options["provider"]["temperature"] == 0 and rec.arm.options["provider"]["model"] == "openai/blob"
