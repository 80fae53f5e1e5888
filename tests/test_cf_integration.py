"""CounterCount through the real paths: scenes make -> run (litellm, test server) -> audit/report."""

from __future__ import annotations

from pathlib import Path

import pytest

from countgym.analysis.tables import write_audit_files
from countgym.cli import main
from countgym.logs import read_records
from countgym.runner import CellSpec, run_cell
from countgym.testing.server import TestServer


@pytest.mark.slow
def test_countercount_end_to_end(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-cf")
    data = tmp_path / "cc"
    assert main(["scenes", "make", "countercount", "--out", str(data), "--limit", "4", "--no-progress"]) == 0
    with TestServer() as srv:
        for arm in ("cf-mcq", "cf-oe+blur+cue", "cf-mcq+generic"):
            spec = CellSpec(dataset=str(data), agent=arm, model="openai/blob", agent_options={"api_base": srv.base_url})
            res = run_cell(spec, tmp_path / "runs", concurrency=2, progress=False)
            assert res.ran == 8 and res.errors == 0
    recs = read_records([tmp_path / "runs"])
    assert {r.env_options["task"] for r in recs} == {"countercount"}
    blur = [r for r in recs if r.arm.name == "cf-oe+blur+cue"]
    assert all(r.env_options["blur"] and r.env_options["cue"] and r.env_options["question"] == "oe" for r in blur)
    files = write_audit_files([tmp_path / "runs"], tmp_path / "audit")
    html = files.report.read_text()
    assert 'id="countercount"' in html and "bias" in html
    assert (tmp_path / "audit" / "countercount" / "cf_scores.csv").is_file()


@pytest.mark.slow
def test_audit_judge_resolves_ambiguous_replies(tmp_path: Path, monkeypatch) -> None:
    """Replies with several incompatible numbers go to the judge, whose answers are cached."""
    from countgym.envs.actions import Reply

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-cf")
    data = tmp_path / "cc"
    assert main(["scenes", "make", "countercount", "--out", str(data), "--limit", "2", "--no-progress"]) == 0

    class Hedger:
        def reset(self, obs, task):
            pass

        def act(self, obs):
            return Reply(text="It could be 3 or maybe 5.")

    spec = CellSpec(dataset=str(data), agent="cf-oe", model="openai/blob")
    res = run_cell(spec, tmp_path / "runs", policy_factory=Hedger, progress=False)
    assert all(r.answer is None for r in read_records([res.log]))

    class Judge:
        model = "judge"
        calls = 0

        def complete(self, messages):
            Judge.calls += 1
            return Reply(text="5")

    files = write_audit_files([tmp_path / "runs"], tmp_path / "audit", judge=Judge())
    import pandas as pd

    eps = pd.read_csv(tmp_path / "audit" / "countercount" / "cf_episodes.csv")
    assert (eps["answer"] == 5).all() and Judge.calls == len(eps)
    write_audit_files([tmp_path / "runs"], tmp_path / "audit", judge=Judge())
    assert Judge.calls == len(eps)  # the second audit read the cache
    assert files.report is not None
