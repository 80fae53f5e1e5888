"""Anything a model writes can be logged and audited; one bad log line never stops the others.

Issue cases: a lone surrogate in a reply (all three environments, run and resume), an answer
past the 64-bit range in an old log, a line nested 100,000 deep, a number past Python's digit
limit, non-finite coordinates, a record the serialiser refuses, a line from a newer schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from countgym.analysis.tables import write_audit_files
from countgym.cli import main
from countgym.errors import UserError
from countgym.logs import SCHEMA_VERSION, LogWriter, StepRecord, iter_records, read_records
from countgym.runner import CellSpec, done_episodes, run_cell

PLUGINS = str(Path(__file__).parent / "plugins")
LONE = "\ud800"


@pytest.fixture(autouse=True)
def _plugins_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(PLUGINS)


@pytest.fixture(scope="module")
def task_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tasks")
    assert main(["scenes", "make", "countvideo", "--out", str(root / "cv"), "--limit", "2", "--size", "64x36", "--no-progress"]) == 0
    assert main(["scenes", "make", "countercount", "--out", str(root / "cc"), "--limit", "1", "--no-progress"]) == 0
    return {"cv": root / "cv", "cc": root / "cc"}


def _surrogate_policy() -> object:
    from hostile_policy import LoneSurrogate

    return LoneSurrogate()


@pytest.mark.slow
@pytest.mark.parametrize(("task", "arm"), [("dots", "tag"), ("cv", "video-p1"), ("cc", "cf-oe"), ("cc", "cf-mcq")])
def test_lone_surrogate_reply_is_logged_losslessly_resumed_and_audited(
    task: str, arm: str, tiny_dataset, task_data, tmp_path: Path
) -> None:
    data = tiny_dataset.root if task == "dots" else task_data[task]
    spec = CellSpec(dataset=str(data), agent=arm, model="m")
    res = run_cell(spec, tmp_path / "runs", policy_factory=_surrogate_policy, progress=False)
    assert res.ran >= 2 and res.errors == 0, res.error_messages
    raw = res.log.read_bytes()
    raw.decode("utf-8")  # strict: the log is valid UTF-8
    assert b"\\ud800" in raw and len(raw.splitlines()) == res.ran
    exact = list(iter_records([res.log], exact_text=True))
    assert all(LONE in r.steps[0].reply for r in exact)  # lossless
    assert all(r.end == "answer" and r.answer == 2 for r in exact) or arm == "cf-mcq"
    shown = read_records([res.log])
    assert all("\\ud800" in r.steps[0].reply and LONE not in r.steps[0].reply for r in shown)
    again = run_cell(spec, tmp_path / "runs", policy_factory=_surrogate_policy, progress=False)
    assert again.ran == 0 and again.skipped == res.ran
    files = write_audit_files([tmp_path / "runs"], tmp_path / "audit", n_resamples=20)
    assert files.report is not None
    if files.viewer_shown:  # the trajectory viewer shows replies (image tasks)
        assert "\\ud800" in files.report.read_text(encoding="utf-8")


def _valid_line(tiny_dataset, tmp_path: Path) -> dict:
    res = run_cell(CellSpec(dataset=str(tiny_dataset.root), agent="oracle", limit=1), tmp_path / "src", progress=False)
    return json.loads(res.log.read_text().splitlines()[0])


def test_bad_lines_are_skipped_one_warning_each_and_the_rest_audited(tiny_dataset, tmp_path: Path) -> None:
    base = _valid_line(tiny_dataset, tmp_path)

    def variant(eid: str, **changes: object) -> str:
        return json.dumps({**base, "episode_id": eid, **changes})

    lines = [
        variant("good"),
        '{"a":' * 100_000 + "1" + "}" * 100_000,  # RecursionError in json.loads today
        variant("digits").replace('"seed":', '"seed":' + "9" * 4301 + ",\"x\":"),  # past the digit limit
        variant("nan", tags=[[float("nan"), 1.0]]),  # json.dumps writes NaN; not a coordinate
        variant("bigseed", seed=2**64),
        variant("huge-answer", answer=99999999999999999999999),  # kept by old CountVideo-v0 logs
        variant("good2", repeat=1),
    ]
    run = tmp_path / "runs"
    run.mkdir()
    (run / "old.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning) as caught:
        assert main(["audit", str(run), "--out", str(tmp_path / "audit"), "--resamples", "20", "--viewer-episodes", "0"]) == 0
    skipped = [str(w.message) for w in caught if "skipped invalid log line" in str(w.message)]
    assert [e.split("old.jsonl:")[1].split(":")[0] for e in skipped] == ["2", "3", "4", "5"]
    assert all(len(e) < 600 and "\n" not in e for e in skipped)
    eps = pd.read_csv(tmp_path / "audit" / "episodes.csv").set_index("episode_id")
    assert sorted(eps.index) == ["good", "good2", "huge-answer"]
    assert pd.isna(eps.loc["huge-answer", "answer"]) and eps.loc["huge-answer", "end"] == "invalid"
    assert eps.loc["good", "answer"] == base["answer"]


def test_answer_out_of_range_reads_as_invalid_with_reason() -> None:
    from countgym.logs import EpisodeRecord

    rec = EpisodeRecord.model_validate({
        "episode_id": "e", "stimulus_id": "s", "dataset": "d", "arm": {"name": "a"}, "model": "m",
        "seed": 0, "answer": -(2**70), "end": "answer", "countgym_version": "0", "template_hash": "h",
        "started_at": "t", "finished_at": "t",
    })  # fmt: skip
    assert rec.answer is None and rec.end == "invalid" and "64-bit" in (rec.error or "")


def test_record_the_serialiser_refuses_is_logged_as_an_error_record(tiny_dataset, tmp_path: Path) -> None:
    from countgym.logs import EpisodeRecord

    base = EpisodeRecord.model_validate(_valid_line(tiny_dataset, tmp_path))
    deep: dict = {"x": 1}
    for _ in range(900):  # a plug-in's typed action nested past the serialiser's depth
        deep = {"x": deep}
    step = StepRecord(index=0, reply=f"kept {LONE}", action=deep)
    rec = base.model_copy(update={"steps": [step], "episode_id": "deep"})
    writer = LogWriter(tmp_path / "x.jsonl")
    writer.append(rec)
    writer.append(base)
    writer.close()
    got = list(iter_records([tmp_path / "x.jsonl"], exact_text=True))
    assert [r.episode_id for r in got] == ["deep", base.episode_id]
    assert got[0].end == "error" and "could not be serialised" in got[0].error
    assert got[0].steps[0].reply == f"kept {LONE}" and got[0].steps[0].action is None
    assert got[1] == base


def test_non_finite_floats_are_written_as_null_on_the_escaping_path(tiny_dataset, tmp_path: Path) -> None:
    from countgym.logs import EpisodeRecord, dump_record

    base = EpisodeRecord.model_validate(_valid_line(tiny_dataset, tmp_path))
    rec = base.model_copy(update={"steps": [StepRecord(index=0, reply=LONE, cost=float("inf"), latency_s=float("nan"))]})
    line = dump_record(rec)
    data = json.loads(line)  # strict JSON: no NaN / Infinity tokens
    assert data["steps"][0]["cost"] is None and data["steps"][0]["latency_s"] is None
    assert "NaN" not in line and "Infinity" not in line


def _newer_line(tiny_dataset, tmp_path: Path) -> tuple[list[str], Path]:
    """A cell run through the CLI whose log's first line is then marked as a newer schema."""
    args = ["run", "--data", str(tiny_dataset.root), "--agent", "oracle", "--out", str(tmp_path / "runs"), "--no-progress"]
    assert main(args) == 0
    (log,) = (tmp_path / "runs").glob("*.jsonl")
    lines = log.read_text().splitlines()
    newer = json.loads(lines[0])
    newer["schema_version"] = SCHEMA_VERSION + 1
    log.write_text("\n".join([json.dumps(newer), *lines[1:]]) + "\n")
    return args, log


def test_resume_refuses_a_log_from_a_newer_schema_naming_both_versions(tiny_dataset, tmp_path: Path, capsys) -> None:
    args, log = _newer_line(tiny_dataset, tmp_path)
    before = log.read_text()
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"schema version {SCHEMA_VERSION + 1}" in err and f"schema version {SCHEMA_VERSION} and older" in err
    assert log.read_text() == before  # nothing re-run, nothing appended
    with pytest.raises(UserError, match=":1: written with log schema version"):
        done_episodes(log)


def test_audit_skips_newer_schema_lines_with_both_versions(tiny_dataset, tmp_path: Path) -> None:
    _, log = _newer_line(tiny_dataset, tmp_path)
    with pytest.warns(UserWarning, match=rf":1: skipped invalid log line: written with log schema version {SCHEMA_VERSION + 1}"):
        recs = read_records([log])
    assert len(recs) == 2
