"""Secrets never written: a key echoed in a successful reply, credentials inside ``api_base`` and
keys passed as options are masked in every file a run or an audit writes, and a key is not part
of a cell's identity (rotating it resumes the cell instead of paying for every episode again)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("litellm")

from countgym.analysis import write_audit  # noqa: E402
from countgym.envs.actions import Reply  # noqa: E402
from countgym.logs import read_records  # noqa: E402
from countgym.runner import CellSpec, run_cell  # noqa: E402
from countgym.secrets import redact_url, scrub_data, scrub_text  # noqa: E402
from countgym.testing.server import TestServer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")
ENV_KEY = "env-ECHOED-0123456789-key"  # not sk- shaped: only the environment makes it a secret
OPTION_KEY = "sk-option-ECHOED-9876543210"
URL_PASSWORD = "urlpass-ECHOED-55555"


def all_text(*folders: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for f in folders for p in f.rglob("*") if p.is_file())


class EchoPolicy:
    """A 'model' that repeats the credentials it was shown, then answers."""

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        pass

    def act(self, observation: dict[str, Any]) -> Reply:
        text = (f"My key is {ENV_KEY}; yours {OPTION_KEY}; base http://me:{URL_PASSWORD}@h/v1 "
                f"and {json.dumps(OPTION_KEY + chr(10))}. ANSWER: 4")
        return Reply(text=text, error=None)


def test_scrub_text_masks_known_secrets_and_url_userinfo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-abcdefgh12345")
    monkeypatch.setenv("SHORT_KEY", "abc")  # too short to be taken for a key
    assert scrub_text("a tok-abcdefgh12345 b abc") == "a *** b abc"
    assert redact_url("see https://alice:pw@host:8000/v1?x=1 and http://host/a@b") == (
        "see https://***@host:8000/v1?x=1 and http://host/a@b"
    )
    assert scrub_data({"k": ["x tok-abcdefgh12345", 3], "tok-abcdefgh12345": None}) == {"k": ["x ***", 3], "***": None}


def test_echoed_keys_never_reach_logs_headers_or_report(tiny_dataset, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    spec = CellSpec(dataset=str(tiny_dataset.root), agent="direct", model="openai/echo",
                    agent_options={"api_key": OPTION_KEY, "api_base": f"http://me:{URL_PASSWORD}@127.0.0.1:9/v1"})
    res = run_cell(spec, tmp_path / "runs", policy_factory=EchoPolicy, progress=False)
    assert res.ran == 3 and res.errors == 0
    recs = read_records([tmp_path / "runs"])
    assert all(r.answer == 4 for r in recs) and recs[0].steps[0].reply.startswith("My key is ***; yours ***;")
    write_audit([tmp_path / "runs"], tmp_path / "audit")
    text = all_text(tmp_path)
    for secret in (ENV_KEY, OPTION_KEY, URL_PASSWORD):
        assert secret not in text
    assert (tmp_path / "audit" / "report.html").is_file() and (tmp_path / "runs").glob("*.cell.json")


def test_a_log_written_before_scrubbing_is_scrubbed_when_read(tiny_dataset, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    spec = CellSpec(dataset=str(tiny_dataset.root), agent="direct", model="openai/echo")
    res = run_cell(spec, tmp_path / "runs", policy_factory=EchoPolicy, progress=False)
    assert ENV_KEY in res.log.read_text()  # not a known secret at run time
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)  # known at audit time
    write_audit([tmp_path / "runs"], tmp_path / "audit")
    assert ENV_KEY not in all_text(tmp_path / "audit")


def test_credentials_in_api_base_are_redacted_but_used(tiny_dataset, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-this-one")
    with TestServer() as srv:
        base = srv.base_url.replace("http://", f"http://alice:{URL_PASSWORD}@")
        spec = CellSpec(dataset=str(tiny_dataset.root), agent="tag", model="openai/blob",
                        agent_options={"api_base": base})
        res = run_cell(spec, tmp_path, progress=False)
    assert res.errors == 0
    rec = read_records([res.log])[0]
    assert rec.arm.options["api_base"] == srv.base_url.replace("http://", "http://***@")
    assert rec.arm.options["provider"]["api_base"] == rec.arm.options["api_base"]
    assert URL_PASSWORD not in all_text(tmp_path)


def test_rotating_a_key_resumes_the_same_cell(tiny_dataset, tmp_path: Path) -> None:
    def spec(key: str, password: str) -> CellSpec:
        return CellSpec(dataset=str(tiny_dataset.root), agent="direct", model="openai/echo",
                        agent_options={"api_key": key, "api_base": f"http://u:{password}@host/v1", "max_tokens": 9})

    a, b = spec("sk-first-key-00000001", "pw-first-0001"), spec("sk-second-key-0000002", "pw-second-0002")
    assert a.log_name() == b.log_name()
    other = CellSpec(dataset=a.dataset, agent="direct", model="openai/echo",
                     agent_options={**a.agent_options, "max_tokens": 10})
    assert other.log_name() != a.log_name()  # real options still tell cells apart
    # Options without credentials keep the identity they had (existing run folders resume).
    plain = CellSpec(dataset="d", agent="tag", agent_options={"temperature": 0}, env_options={"budget": 6})
    assert plain.key() == "e57895d2"  # its key before credentials left the identity
    assert run_cell(a, tmp_path, policy_factory=EchoPolicy, progress=False).ran == 3
    again = run_cell(b, tmp_path, policy_factory=EchoPolicy, progress=False)
    assert again.ran == 0 and again.skipped == 3


def test_a_judge_that_echoes_a_key_is_cached_without_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from countgym.analysis.cf import cf_frame, judge_ambiguous
    from countgym.envs.cf_env import CounterCountEnv
    from countgym.scenes.counterfactual import make_countercount
    from countgym.stimulus import Dataset

    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    ds = Dataset(make_countercount(tmp_path / "cf", limit=1, progress=False))
    env = CounterCountEnv(ds, arm="cf-mcq", model="m")
    sid = ds.ids()[0]
    env.reset(seed=0, options={"stimulus_id": sid})
    env.step("7, maybe 9")

    class Judge:
        model = "judge-model"

        def complete(self, messages: list[dict]) -> Reply:
            return Reply(text=f"7 (and my key is {ENV_KEY})")

    judge_ambiguous(cf_frame([env.episode_record()], ds), Judge(), dataset=ds, cache_dir=tmp_path / "j")
    cached = all_text(tmp_path / "j")
    assert "my key is ***" in cached and ENV_KEY not in cached


def test_known_secrets_follow_every_change_of_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment's credential variables are cached between records, never across a change:
    a new variable, a new value of the same variable (same names, same count) and a removal are
    all seen at once."""
    from countgym.secrets import known_secrets

    first, second = "sk-first-0123456789abcdef", "sk-second-0123456789abcdef"
    monkeypatch.delenv("COUNTGYM_TEST_API_KEY", raising=False)
    assert first not in known_secrets()
    monkeypatch.setenv("COUNTGYM_TEST_API_KEY", first)
    assert first in known_secrets()
    monkeypatch.setenv("COUNTGYM_TEST_API_KEY", second)
    now = known_secrets()
    assert second in now and first not in now
    monkeypatch.delenv("COUNTGYM_TEST_API_KEY")
    assert second not in known_secrets()
