"""Transient failures are retried, not scored: resume re-runs episodes that ended in a 429, 5xx,
timeout or dropped connection (``--no-retry-errors`` keeps them), analysis leaves them out of
accuracy and counts them in an ``errors`` column, and a quota 429 with a huge Retry-After stops
the cell with one line instead of failing every episode."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("litellm")

from countgym.analysis import write_audit  # noqa: E402
from countgym.cli import main  # noqa: E402
from countgym.errors import is_transient_error  # noqa: E402
from countgym.logs import read_records  # noqa: E402
from countgym.testing.server import TestServer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-retry-errors")


def run_argv(data: Path, out: Path, srv: TestServer, *extra: str) -> list[str]:
    return ["run", "--data", str(data), "--agent", "direct", "--model", "openai/blob", "--out", str(out),
            "--no-progress", "--agent-option", f"api_base={srv.base_url}", "--agent-option", "max_attempts=1",
            *extra]


def test_resume_reruns_transient_errors_and_only_those(tiny_dataset, tmp_path: Path, capsys) -> None:
    # Requests 1-2 fail for good reasons to retry (500, dropped), request 3 for a permanent one.
    with TestServer(schedule=["500", "drop", "401"]) as srv:
        assert main(run_argv(tiny_dataset.root, tmp_path, srv)) == 1  # every episode failed
        first = read_records([tmp_path])
        assert sorted(r.end for r in first) == ["error", "error", "error"]
        assert sum(is_transient_error(r.error) for r in first) == 2
        capsys.readouterr()
        assert main(run_argv(tiny_dataset.root, tmp_path, srv)) == 0
        out = capsys.readouterr().out
    assert "2 episodes run (2 re-run after a transient error), 1 already done" in out
    recs = read_records([tmp_path])
    assert len(recs) == 3 and len({r.episode_id for r in recs}) == 3  # replaced, not duplicated
    assert sorted(r.end for r in recs) == ["answer", "answer", "error"]
    assert [r for r in recs if r.end == "error"][0].error.startswith("AuthenticationError")


def test_no_retry_errors_keeps_them(tiny_dataset, tmp_path: Path, capsys) -> None:
    with TestServer(schedule=["503"]) as srv:
        assert main(run_argv(tiny_dataset.root, tmp_path, srv)) == 0
        capsys.readouterr()
        assert main(run_argv(tiny_dataset.root, tmp_path, srv, "--no-retry-errors")) == 0
        assert "0 episodes run, 3 already done" in capsys.readouterr().out
        assert [r.end for r in read_records([tmp_path])].count("error") == 1
        assert main(run_argv(tiny_dataset.root, tmp_path, srv)) == 0
        assert "1 episodes run (1 re-run after a transient error)" in capsys.readouterr().out
    assert all(r.end == "answer" for r in read_records([tmp_path]))


def test_quota_429_stops_the_cell_with_one_line(tiny_dataset, tmp_path: Path, capsys) -> None:
    with TestServer(schedule=["429"] * 6, retry_after=86400) as srv:
        argv = run_argv(tiny_dataset.root, tmp_path, srv, "--concurrency", "2", "--repeats", "3")
        t0 = time.monotonic()
        rc = main([a if a != "max_attempts=1" else "max_attempts=6" for a in argv])
        assert time.monotonic() - t0 < 20
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1
        assert "429" in err[0] and "86400 s" in err[0] and "resume" in err[0]
        assert srv.request_count <= 2  # no episode started after the first quota answer came back
        assert read_records([tmp_path]) == []  # nothing scored as a failure
        # Later, with the quota back, the same command resumes and runs everything.
        srv.schedule = []
        assert main(run_argv(tiny_dataset.root, tmp_path, srv, "--concurrency", "2", "--repeats", "3")) == 0
    recs = read_records([tmp_path])
    assert len(recs) == 9 and all(r.end == "answer" for r in recs)


@pytest.mark.slow
def test_errored_episodes_are_not_scored(tiny_dataset, tmp_path: Path) -> None:
    # 10 episodes, the first 4 calls fail: the model answered all 6 it was asked, correctly.
    with TestServer(schedule=["500"] * 4) as srv:
        argv = run_argv(tiny_dataset.root, tmp_path / "runs", srv, "--repeats", "4", "--limit", "3")
        assert main(argv) == 0
    recs = read_records([tmp_path / "runs"])
    recs_error = [r for r in recs if r.end == "error"]
    assert len(recs) == 12 and len(recs_error) == 4
    write_audit([tmp_path / "runs"], tmp_path / "audit")
    row = pd.read_csv(tmp_path / "audit" / "summary.csv").iloc[0]
    assert row["errors"] == 4 and row["n_episodes"] == 8
    assert row["em"] == 1.0 and row["coverage"] == 1.0 and row["mae"] == 0.0


def test_spent_quota_without_retry_after_stops_too() -> None:
    from countgym.agents.backends.litellm_backend import LiteLLMBackend
    from countgym.errors import ProviderQuotaError

    class RateLimit(Exception):
        status_code = 429

    be = LiteLLMBackend("openai/blob", api_base="http://127.0.0.1:9/v1", max_total_wait_s=60)
    with pytest.raises(ProviderQuotaError, match="quota is spent"):
        be._stop_on_quota(RateLimit(), None, "RateLimitError: You exceeded your current quota (insufficient_quota)")
    with pytest.raises(ProviderQuotaError, match="61 s"):
        be._stop_on_quota(RateLimit(), 61.0, "RateLimitError: slow down")
    be._stop_on_quota(RateLimit(), 60.0, "RateLimitError: slow down")  # a wait we can afford: retried
    be._stop_on_quota(RateLimit(), None, "RateLimitError: slow down")
