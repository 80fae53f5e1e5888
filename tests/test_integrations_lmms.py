"""countgym's lmms-eval task package: documents and scoring (no lmms-eval needed), then the real
`lmms-eval` command (the docs' install: CI's .venv-lmms) with its OpenAI-compatible API model
against the local test server, on every task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from countgym.integrations import lmms_tasks
from countgym.integrations.evalshape import sample_id, summary_metrics


def _utils(folder: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("countgym_lmms_utils", folder / "utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_prepare_writes_tasks_whose_documents_hide_the_truth(tiny_dataset, tmp_path) -> None:
    assert lmms_tasks.main(["--out", str(tmp_path / "t"), "--dotarrays", str(tiny_dataset.root)]) == 0
    yaml_text = (tmp_path / "t" / "countgym_dotarrays_direct.yaml").read_text()
    assert "task: countgym_dotarrays_direct" in yaml_text and "DATA_FILE" not in yaml_text
    docs = [json.loads(x) for x in (tmp_path / "t" / "data" / "countgym_dotarrays_direct.jsonl").read_text().splitlines()]
    assert {d["stimulus_id"] for d in docs} == set(tiny_dataset.ids())
    for d in docs:
        stim = tiny_dataset[d["stimulus_id"]]
        assert d["doc_id"] == sample_id(stim.id, tiny_dataset.content_hash(stim))  # as Inspect's sample ids
        assert d["question"].startswith("How many dots") and d["n"] == stim.n
    # What the model sees: the image and the question, nothing else.
    utils = _utils(tmp_path / "t")
    [msg] = utils.countgym_doc_to_messages(docs[0])
    assert [p["type"] for p in msg["content"]] == ["image", "text"]
    assert utils.countgym_doc_to_text(docs[0]) == docs[0]["question"]


def test_scoring_uses_countgyms_extraction_and_the_audits_metrics(tiny_dataset, tmp_path) -> None:
    lmms_tasks.prepare(tmp_path / "t", {"dotarrays": str(tiny_dataset.root)})
    utils = _utils(tmp_path / "t")
    docs = [json.loads(x) for x in (tmp_path / "t" / "data" / "countgym_dotarrays_direct.jsonl").read_text().splitlines()]
    replies = {"four": "ANSWER: 4", "two": "I think ANSWER: 3", "row": "no idea"}
    results = [utils.countgym_process_results(d, [replies[d["stimulus_id"]]]) for d in docs]
    by = {d["stimulus_id"]: r["em"] for d, r in zip(docs, results, strict=True)}
    assert by["four"]["correct"] == 1.0 and by["two"]["abs_error"] == 1.0 and by["row"]["answered"] == 0.0
    em = utils.countgym_em([r["em"] for r in results])
    mae = utils.countgym_mae([r["mae"] for r in results])
    assert em == pytest.approx(1 / 3) and mae == pytest.approx(0.5)  # MAE over answered episodes
    assert summary_metrics([r["em"] for r in results])["em"] == em


def test_missing_dataset_option_is_one_line(capsys) -> None:
    assert lmms_tasks.main(["--out", "x"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: give at least one of")


def test_lmms_eval_runs_the_tasks_against_the_test_server(tiny_dataset, tiny_countvideo, tiny_countercount,
                                                         tmp_path) -> None:
    pytest.importorskip("lmms_eval")
    from countgym.testing.server import TestServer

    tasks = lmms_tasks.prepare(tmp_path / "t", {"dotarrays": str(tiny_dataset.root),
                                                "countvideo": str(tiny_countvideo),
                                                "countercount": str(tiny_countercount)})
    assert len(tasks) == 4
    with TestServer() as srv:
        script = Path(sys.executable).with_name("lmms-eval")  # the console script the docs name
        cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "lmms_eval"]
        proc = subprocess.run(
            [*cmd, "--model", "openai", "--model_args",
             f"model_version=blob,base_url={srv.base_url},api_key=none", "--tasks", ",".join(tasks),
             "--include_path", str(tmp_path / "t"), "--output_path", str(tmp_path / "out"), "--batch_size", "1",
             "--log_samples"],
            cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, "OPENAI_API_KEY": "none"},
        )
    [results_file] = (tmp_path / "out").rglob("*_results.json")  # lmms-eval exits 0 on errors too
    results = json.loads(results_file.read_text())["results"]
    assert set(results) == set(tasks), proc.stderr[-2000:]
    dot = results["countgym_dotarrays_direct"]
    assert dot["em,none"] == 1.0 and dot["mae,none"] == 0.0  # the test server counts the discs exactly
    for t in tasks:
        assert 0.0 <= results[t]["em,none"] <= 1.0
    samples = [json.loads(x) for f in (tmp_path / "out").rglob("*_samples_countgym_dotarrays_direct.jsonl")
               for x in f.read_text().splitlines()]
    assert len(samples) == 3
