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
