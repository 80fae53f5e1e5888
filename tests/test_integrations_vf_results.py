"""`countgym audit` reads vf-eval's results.jsonl (verifiers' output) directly: the reader needs
no third-party package, so these run on the light install."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from countgym.cli import main
from countgym.integrations.vf_results import episode_logs, is_vf_results
from countgym.logs import read_records


def _vf_run(tiny_dataset, tmp_path: Path, *, with_records: bool = True) -> Path:
    """A vf-eval run folder holding the episodes of a countgym run, as vf-eval writes them."""
    run = tmp_path / "countgym-run"
    assert main(["run", "--data", str(tiny_dataset.root), "--agent", "noisy-pointer", "--out", str(run)]) == 0
    recs = read_records([run])
    out = tmp_path / "outputs" / "evals" / "countgym--blob" / "abc123"
    out.mkdir(parents=True)
    with (out / "results.jsonl").open("w") as f:
        for i, r in enumerate(recs):
            row = {"example_id": i, "prompt": [], "completion": [], "reward": 1.0, "answer": str(r.truth.n)}
            if with_records:
                row["countgym_record"] = r.model_dump(mode="json") | {"model": ""}
            f.write(json.dumps(row) + "\n")
        f.write('{"example_id": 9, "prompt"')  # a torn last line (killed run) is skipped
    (out / "metadata.json").write_text(json.dumps({"env_id": "countgym", "model": "blob"}))
    return out


def test_audit_reads_a_vf_eval_run_folder(tiny_dataset, tmp_path) -> None:
    out = _vf_run(tiny_dataset, tmp_path)
    assert is_vf_results(out / "results.jsonl")
    assert main(["audit", str(out), "--out", str(tmp_path / "audit"), "--no-judge"]) == 0
    with open(tmp_path / "audit" / "episodes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    ref = {r.episode_id: r for r in read_records([tmp_path / "countgym-run"])}
    assert len(rows) == len(ref) == 3
    for row in rows:
        r = ref[row["episode_id"]]
        assert row["model"] == "blob"  # from metadata.json where the record has none
        assert int(row["n_true"]) == r.truth.n and row["answer"] == str(r.answer)


def test_countgym_logs_pass_through_and_records_are_required(tiny_dataset, tmp_path, capsys) -> None:
    out = _vf_run(tiny_dataset, tmp_path, with_records=False)
    logs = sorted((tmp_path / "countgym-run").rglob("*.jsonl"))
    assert episode_logs(logs, tmp_path / "x") == logs and not is_vf_results(logs[0])
    capsys.readouterr()
    assert main(["audit", str(out), "--out", str(tmp_path / "audit")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-C countgym_record" in err[0]


# --- verifiers 0.4: a run folder holds traces.jsonl (one episode a line, its traces carrying the
# record in info) and configs/resolved/eval.json ---------------------------------------------------
def _vf04_run(tiny_dataset, tmp_path: Path, *, with_records: bool = True) -> Path:
    run = tmp_path / "countgym-run"
    if not run.exists():
        assert main(["run", "--data", str(tiny_dataset.root), "--agent", "noisy-pointer", "--out", str(run)]) == 0
    recs = read_records([run])
    out = tmp_path / "outputs" / ("countgym--blob--countgym--1a2b3c4d" if with_records else "other")
    (out / "configs" / "resolved").mkdir(parents=True)
    with (out / "traces.jsonl").open("w") as f:
        for i, r in enumerate(recs):
            info = {"countgym_record": r.model_dump(mode="json") | {"model": ""}} if with_records else {}
            trace = {"version": 1, "id": f"t{i}", "task": {"type": "CountgymTask", "data": {"idx": i}},
                     "agent": {"config": {"model": "blob" if i else None}, "name": "agent"},
                     "nodes": [], "rewards": {"exact": {"score": 1.0, "weight": 1.0}}, "info": info, "ok": True}
            episode = {"id": f"e{i}", "env": {"id": "countgym"}, "task": trace["task"], "ok": True, "traces": [trace]}
            f.write(json.dumps(episode) + "\n")
        f.write('{"id": "e9", "task": {"type"')  # a torn last line (killed run) is skipped
    (out / "configs" / "resolved" / "eval.json").write_text(json.dumps({"model": "run-model"}))
    (out / "logs").mkdir()
    return out


def test_audit_reads_a_vf_eval_04_run_folder(tiny_dataset, tmp_path) -> None:
    out = _vf04_run(tiny_dataset, tmp_path)
    assert is_vf_results(out / "traces.jsonl")
    assert main(["audit", str(out), "--out", str(tmp_path / "audit"), "--no-judge"]) == 0
    with open(tmp_path / "audit" / "episodes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    ref = {r.episode_id: r for r in read_records([tmp_path / "countgym-run"])}
    assert len(rows) == len(ref) == 3
    # The trace's agent names the model; where it does not, the run's saved config does.
    assert sorted(row["model"] for row in rows) == ["blob", "blob", "run-model"]
    for row in rows:
        r = ref[row["episode_id"]]
        assert int(row["n_true"]) == r.truth.n and row["answer"] == str(r.answer)
        assert row["correct"] == str(r.answer == r.truth.n)


def test_a_vf_eval_04_run_of_another_taskset_is_one_line(tiny_dataset, tmp_path, capsys) -> None:
    out = _vf04_run(tiny_dataset, tmp_path, with_records=False)
    capsys.readouterr()
    assert main(["audit", str(out), "--out", str(tmp_path / "audit")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vf-eval countgym" in err[0] and "countgym_record" in err[0]


def test_repeats_rerun_by_a_resume_stay_distinct(tiny_dataset, tmp_path) -> None:
    """vf-eval --resume re-runs a rollout in a new process, which numbers its repeats from 0
    again; the audit pairs episodes by stimulus and repeat, so the reader makes them distinct."""
    out = _vf04_run(tiny_dataset, tmp_path)
    lines = (out / "traces.jsonl").read_text().splitlines()[:-1]
    # Every episode twice: the second copy (another episode id, the same repeat 0) as a resumed
    # run appends it.
    again = []
    for line in lines:
        ep = json.loads(line)
        rec = ep["traces"][0]["info"]["countgym_record"]
        rec["episode_id"] += "-resumed"
        again.append(json.dumps(ep))
    (out / "traces.jsonl").write_text("\n".join(lines + again) + "\n")
    from countgym.integrations.vf_results import iter_vf_records

    recs = list(iter_vf_records(out / "traces.jsonl"))
    assert len(recs) == 6 and len({r["episode_id"] for r in recs}) == 6
    pairs = sorted((r["stimulus_id"], r["repeat"]) for r in recs)
    assert pairs == sorted({(r["stimulus_id"], k) for r in recs for k in (0, 1)})
    assert [r["repeat"] for r in recs[:3]] == [0, 0, 0]  # unique numbers pass unchanged
