"""Model-assisted extraction at audit time, through the CLI and the local test server:
the CountVideoBench parser (``--parser``) and the CounterCount judge (``--judge same``: the run's
own model at an endpoint the auditor names; ``--judge MODEL``: another model; by default no model
is called), cached and recorded per episode."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from countgym.cli import main
from countgym.envs.actions import Reply
from countgym.logs import read_records
from countgym.runner import CellSpec, run_cell
from countgym.testing.server import TestServer

pytestmark = pytest.mark.slow  # end to end: scenes, runs, several audits


def _replier(text: str, provider: dict[str, Any] | None = None) -> Any:
    class Replier:
        def reset(self, obs: Any, task: Any) -> None:
            pass

        def act(self, obs: Any) -> Reply:
            return Reply(text=text)

    def factory() -> Replier:
        return Replier()

    factory.provider = provider  # type: ignore[attr-defined]
    return factory


@pytest.fixture(scope="module")
def video_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cvr") / "cv"
    assert main(["scenes", "make", "countvideo", "--out", str(out), "--limit", "3", "--size", "64x36", "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def cf_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cfr") / "cc"
    assert main(["scenes", "make", "countercount", "--out", str(out), "--limit", "2", "--no-progress"]) == 0
    return out


def _episodes(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "episodes.csv")


def test_video_parser_resolves_what_the_rules_leave_and_is_cached(
    tmp_path: Path, video_data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-parser")
    spec = CellSpec(dataset=str(video_data), agent="video-p1", model="openai/vlm")
    res = run_cell(spec, tmp_path / "runs", policy_factory=_replier("It is either 3 or 4, I think 4."), progress=False)
    recs = read_records([res.log])
    assert len(recs) == 3 and all(r.answer is None and r.extracted_by == "none" for r in recs)

    assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "plain"), "--viewer-episodes", "0"]) == 0
    plain = _episodes(tmp_path / "plain")
    assert plain["answer"].isna().all() and (plain["extracted_by"] == "none").all()

    with TestServer() as srv:
        args = ["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "a"), "--viewer-episodes", "0",
                "--parser", "openai/qwen2.5-7b", "--parser-option", f"api_base={srv.base_url}"]
        assert main(args) == 0
        assert srv.request_count == 3 and srv.last_request["model"] == "qwen2.5-7b"
        prompt = srv.last_request["messages"][0]["content"]
        text = prompt if isinstance(prompt, str) else prompt[0]["text"]
        assert "How many" in text and "I think 4" in text and "NaN" in text
        eps = _episodes(tmp_path / "a")
        assert (eps["answer"] == 4).all() and (eps["extracted_by"] == "parser").all()
        assert "answer parser" in (tmp_path / "a" / "report.html").read_text()
        assert main(args) == 0
        assert srv.request_count == 3  # the second audit read the cache


def test_countercount_judge_is_the_runs_own_model_when_asked(
    tmp_path: Path, cf_data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-judge")
    with TestServer() as srv:
        provider = {"model": "openai/blob", "api_base": srv.base_url}
        spec = CellSpec(dataset=str(cf_data), agent="cf-oe", model="openai/blob")
        res = run_cell(spec, tmp_path / "runs", policy_factory=_replier("It could be 3 or maybe 5.", provider), progress=False)
        n = len(read_records([res.log]))
        assert n == 4

        assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "none"), "--no-judge", "--viewer-episodes", "0"]) == 0
        assert srv.request_count == 0 and _episodes(tmp_path / "none")["answer"].isna().all()
        html = (tmp_path / "none" / "report.html").read_text()
        assert "judge: <b>off (--no-judge); 4 of 4 CounterCount replies named several numbers" in html
        assert ("4 counted as no answer for want of a judge; judge them with: countgym audit "
                f"{tmp_path / 'runs'} --out {tmp_path / 'none'} --judge same --judge-option api_base=URL") in html

        assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "dflt"), "--viewer-episodes", "0"]) == 0
        assert srv.request_count == 0  # the paper's judge, but never at the endpoint a log names
        html = (tmp_path / "dflt" / "report.html").read_text()
        assert "judge: <b>could not run (see the notes): each run&#x27;s own model" in html
        assert "4 counted as no answer (the judge could not read them); judge them with:" in html
        assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "a"), "--viewer-episodes", "0",
                     "--judge", "same", "--judge-option", f"api_base={srv.base_url}"]) == 0
        assert srv.request_count == n and srv.last_request["model"] == "blob"
        prompt = srv.last_request["messages"][0]["content"]
        text = prompt if isinstance(prompt, str) else prompt[0]["text"]
        assert text.startswith("Question: How many") and "The correct answer to this question is" in text
        eps = _episodes(tmp_path / "a")
        assert (eps["answer"] == 5).all() and (eps["extracted_by"] == "judge").all()
        cf = pd.read_csv(tmp_path / "a" / "countercount" / "cf_episodes.csv")
        assert (cf["answer"] == 5).all() and (cf["method"] == "judge").all()
        html = (tmp_path / "a" / "report.html").read_text()
        assert "judge: <b>ran: each run&#x27;s own model" in html and "Section 3): openai/blob" in html
        assert "needed it: 4 judged (scored as the number the judge read), 0 counted as no answer" in html

        args = ["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "b"), "--viewer-episodes", "0",
                "--judge", "openai/other-judge", "--judge-option", f"api_base={srv.base_url}"]
        assert main(args) == 0
        assert srv.request_count == 2 * n and srv.last_request["model"] == "other-judge"
        assert "judge: <b>ran: openai/other-judge" in (tmp_path / "b" / "report.html").read_text()


def test_an_unreachable_judge_cannot_stall_the_audit(
    tmp_path: Path, cf_data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-judge")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = {"model": "openai/gone", "api_base": f"http://127.0.0.1:{port}/v1"}
    spec = CellSpec(dataset=str(cf_data), agent="cf-oe", model="openai/gone")
    run_cell(spec, tmp_path / "runs", policy_factory=_replier("3, maybe 5", provider), progress=False)
    start = time.monotonic()
    assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "a"), "--viewer-episodes", "0",
                 "--judge", "same", "--judge-option", f"api_base={provider['api_base']}"]) == 0
    assert time.monotonic() - start < 60
    err = capsys.readouterr().err
    assert err.count("judge openai/gone failed") == 1
    assert _episodes(tmp_path / "a")["answer"].isna().all()


def test_a_scripted_policy_has_no_judge(tmp_path: Path, cf_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = CellSpec(dataset=str(cf_data), agent="cf-oe", model="my-rules")
    run_cell(spec, tmp_path / "runs", policy_factory=_replier("3, maybe 5"), progress=False)
    assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "a"), "--viewer-episodes", "0",
                 "--judge", "same"]) == 0
    assert "cannot judge" in capsys.readouterr().err
    assert (_episodes(tmp_path / "a")["extracted_by"] == "none").all()


def test_option_flags_need_their_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "x.jsonl"
    log.write_text("")
    for args in (["--parser-option", "api_base=x"], ["--judge-option", "api_base=x"], ["--no-judge", "--judge", "openai/x"]):
        assert main(["audit", str(tmp_path), "--out", str(tmp_path / "o"), *args]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_old_video_logs_are_read_again_with_todays_rules(tmp_path: Path, video_data: Path) -> None:
    import json

    spec = CellSpec(dataset=str(video_data), agent="video-p1", model="scripted-video")
    res = run_cell(spec, tmp_path / "runs", policy_factory=_replier("I count 2 of them across the 10 frames."), progress=False)
    assert all(r.answer == 2 and r.extracted_by == "rule" for r in read_records([res.log]))
    # The same replies as an older version logged them: no extracted_by, no answer.
    lines = []
    for line in res.log.read_text().splitlines():
        rec = json.loads(line)
        rec.pop("extracted_by")
        rec.update(answer=None, end="invalid")
        rec["steps"][0].update(action=None, parse_error="several incompatible numbers in the reply (2, 10)")
        lines.append(json.dumps(rec))
    res.log.write_text("\n".join(lines) + "\n")
    assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "a"), "--viewer-episodes", "0"]) == 0
    eps = _episodes(tmp_path / "a")
    assert (eps["answer"] == 2).all() and (eps["extracted_by"] == "rule").all()
