"""The verifiers 0.4 adapter (``verifiers.v1``) end to end: verifiers' own env, agent,
interception server and scoring, a real ``CountImageEnv`` per rollout, and the local
OpenAI-compatible test server as the model. Skipped unless verifiers >= 0.4 is installed
(test_integrations_verifiers.py covers 0.3)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verifiers")
from countgym.integrations import vf_version  # noqa: E402

if not vf_version.uses_v1():  # pragma: no cover - verifiers 0.3 has the classic API
    pytest.skip("verifiers < 0.4 (the classic API is tested in test_integrations_verifiers.py)",
                allow_module_level=True)

import verifiers.v1 as vf  # noqa: E402

from countgym.agents.arms import arm_env_options, make_arm_policy  # noqa: E402
from countgym.errors import UserError  # noqa: E402
from countgym.integrations.verifiers import API, evaluate_sync, load_environment  # noqa: E402
from countgym.logs import EpisodeRecord, read_records  # noqa: E402
from countgym.testing.server import TestServer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def _config(srv: TestServer, monkeypatch: pytest.MonkeyPatch) -> vf.EvalClientConfig:
    monkeypatch.setenv("COUNTGYM_TEST_KEY", "none")
    return vf.EvalClientConfig(base_url=srv.base_url, api_key_var="COUNTGYM_TEST_KEY")


def _traces(episodes: list) -> list:
    assert all(len(e.traces) == 1 for e in episodes)
    return [e.traces[0] for e in episodes]


def _record(trace) -> EpisodeRecord:
    return EpisodeRecord.model_validate(trace.info["countgym_record"])


def test_rollouts_run_the_real_tool_loop_and_score_with_countgym_rewards(tiny_dataset, monkeypatch) -> None:
    env = load_environment(tiny_dataset, arm="tag", reward="exact")
    assert API == "v1" and isinstance(env, vf.Env)
    with TestServer() as srv:
        traces = _traces(evaluate_sync(env, client=_config(srv, monkeypatch), model="blob", num_examples=3))
    assert len(traces) == 3
    by_id = {t.task.data.stimulus_id: t for t in traces}
    assert set(by_id) == set(tiny_dataset.ids())
    for sid, t in by_id.items():
        n = tiny_dataset[sid].n
        assert t.ok and not t.errors, t.errors
        rec = _record(t)
        assert rec.end == "answer" and rec.answer == n and len(rec.tags) == n and rec.truth.n == n
        rewards = {k: r.score for k, r in t.rewards.items()}
        assert rewards == {"exact": 1.0, "neg_abs_error": 0.0, "audit": float(n)}
        assert t.reward == 1.0  # exact weighs 1, the others 0
        assert (t.metrics["tags"], t.metrics["tool_calls"], t.metrics["answered"]) == (n, 1, 1.0)
        # One model turn per env step: one tag call, one answer.
        assert t.num_turns == len(rec.steps) == 2
        assert t.task.data.answer == str(n)


def test_the_model_sees_the_paper_prompt_and_image_not_the_truth(tiny_dataset, monkeypatch) -> None:
    env = load_environment(tiny_dataset, arm="tag", limit=1)
    with TestServer() as srv:
        [t] = _traces(evaluate_sync(env, client=_config(srv, monkeypatch), model="blob"))
        last = srv.last_request
    msgs = last["messages"]
    assert [m["role"] for m in msgs[:2]] == ["system", "user"]
    assert msgs[0]["content"].startswith("You are counting dots")
    assert any(p.get("type") == "image_url" for p in msgs[1]["content"])
    sid = t.task.data.stimulus_id
    # The true count is not in the prompt text (the stimulus ids here are spelled-out numbers).
    text = json.dumps([m for m in msgs if m["role"] != "assistant"])
    assert f'"{t.task.data.answer}"' not in text and sid == _record(t).stimulus_id


@pytest.mark.slow
def test_same_episodes_as_countgyms_own_runner(tiny_dataset, monkeypatch) -> None:
    pytest.importorskip("litellm")
    from countgym.agents.backends.litellm_backend import LiteLLMBackend
    from countgym.runner import make_env, run_episode

    env = load_environment(tiny_dataset, arm="tag-1")
    with TestServer() as srv:
        traces = _traces(evaluate_sync(env, client=_config(srv, monkeypatch), model="blob"))
        last = srv.last_request["messages"]
        model = LiteLLMBackend("openai/blob", api_base=srv.base_url)
        own = {sid: run_episode(make_env(tiny_dataset, arm_env_options("tag-1"), arm="tag-1", model="blob"),
                                make_arm_policy("tag-1", model), sid, seed=0) for sid in tiny_dataset.ids()}
    # Context policy: only the two most recent images in a late tag-1 request.
    n_images = sum(1 for m in last if isinstance(m["content"], list)
                   for p in m["content"] if p.get("type") == "image_url")
    assert n_images == 2
    assert any(p.get("text") == "[image shown earlier omitted]" for m in last
               if isinstance(m["content"], list) for p in m["content"])
    for t in traces:
        rec = _record(t)
        ref = own[rec.stimulus_id]
        assert rec.tags == ref.tags and rec.answer == ref.answer and rec.end == ref.end
        assert [s.action for s in rec.steps] == [s.action for s in ref.steps]
        assert t.num_turns == len(rec.steps) == rec.truth.n + 1  # one point per call, then the answer


def test_wrong_answers_score_with_the_chosen_reward(tiny_dataset, monkeypatch) -> None:
    # Budget 1 with tag-1: one tag, then the budget-exhausted request; the 'model' answers with
    # the tags it placed (1), so every count above one is wrong by n - 1.
    env = load_environment(tiny_dataset, arm="tag-1", budget=1, reward="neg_abs_error")
    with TestServer() as srv:
        traces = _traces(evaluate_sync(env, client=_config(srv, monkeypatch), model="blob"))
    for t in traces:
        n = int(t.task.data.answer)
        assert _record(t).answer == 1
        assert t.rewards["exact"].score == 0.0 and t.rewards["exact"].weight == 0.0
        assert t.reward == -(n - 1) == t.rewards["neg_abs_error"].score


def test_an_asyncopenai_client_and_repeats(tiny_dataset) -> None:
    from openai import AsyncOpenAI

    env = load_environment(str(tiny_dataset.root), arm="tag")
    with TestServer() as srv:
        client = AsyncOpenAI(base_url=srv.base_url, api_key="sk-countgym-test", max_retries=0)
        traces = _traces(evaluate_sync(env, client=client, model="blob", rollouts_per_example=2))
        auth = srv.last_headers.get("authorization")
    assert len(traces) == 6 and all(t.ok and t.reward == 1.0 for t in traces)
    recs = [_record(t) for t in traces]
    # Two rollouts of a stimulus are two repeats with distinct episode ids; the dataset is named
    # as given, so the audit can resolve it; the model is the run's.
    assert len({r.episode_id for r in recs}) == 6
    assert sorted(r.repeat for r in recs if r.stimulus_id == "two") == [0, 1]
    assert {r.dataset for r in recs} == {str(tiny_dataset.root)} and {r.model for r in recs} == {"blob"}
    assert auth == "Bearer sk-countgym-test"  # the client's key reached the server


def test_native_tool_protocol_gives_the_same_episodes(tiny_dataset, monkeypatch) -> None:
    recs = {}
    for proto in ("json", "native"):
        env = load_environment(tiny_dataset, arm="tag", protocol=proto)
        with TestServer() as srv:
            traces = _traces(evaluate_sync(env, client=_config(srv, monkeypatch), model="blob"))
            if proto == "native":
                assert [t["function"]["name"] for t in srv.last_request["tools"]] == ["tag", "answer"]
                assert [m["role"] for m in srv.last_request["messages"]][-2:] == ["tool", "user"]
        assert all(t.reward == 1.0 for t in traces)
        recs[proto] = sorted((_record(t) for t in traces), key=lambda r: r.stimulus_id)
    for rj, rn in zip(recs["json"], recs["native"], strict=True):
        assert rn.tags == rj.tags and rn.answer == rj.answer
        assert rn.steps[0].tool_calls and not rj.steps[0].tool_calls
        assert rn.arm.options["protocol"] == "native"


def test_verifiers_loads_the_plugins_by_the_package_name(tiny_dataset) -> None:
    import countgym

    assert {"CountgymTaskset", "CountgymEnv", "CountgymHarness"} <= set(countgym.__all__)
    config = vf.resolve_env_config({"taskset": {"id": "countgym", "dataset": str(tiny_dataset.root),
                                                "arm": "full"}})
    env = vf.load_environment(config)
    assert type(env).__name__ == "CountgymEnv" and config.env_id == "countgym"
    assert env.env_options["tools"] == ("tag", "crop", "erase", "grid")
    assert len(list(env.taskset)) == 3
    assert config.agent_harnesses()["agent"].id == "countgym"  # one model call per turn, in process


def vf_errors() -> type[Exception]:
    from pydantic import ValidationError

    return ValidationError


def test_bad_arguments_are_one_line_user_errors(tiny_dataset) -> None:
    with pytest.raises(UserError, match="not a tool-loop arm"):
        load_environment(tiny_dataset, arm="direct")
    with pytest.raises(UserError, match="reward must be one of"):
        load_environment(tiny_dataset, reward="fancy")
    with pytest.raises(UserError, match="unknown dataset 'nope'"):
        load_environment("nope")
    with pytest.raises(UserError, match="budget must be"):
        load_environment(tiny_dataset, budget="x")
    with pytest.raises(vf_errors(), match="not a tool-loop arm"):  # the config refuses it too
        vf.resolve_env_config({"taskset": {"id": "countgym", "dataset": str(tiny_dataset.root), "arm": "direct"}})
    with pytest.raises(UserError, match="client must be"):
        evaluate_sync(load_environment(tiny_dataset), client=42, model="blob")


@pytest.mark.slow
def test_vf_eval_results_are_read_by_countgym_audit(tiny_dataset, tmp_path: Path) -> None:
    """verifiers' own CLI, `vf-eval countgym ...`, then `countgym audit` on its run folder: the
    audit's numbers are those of the same episodes' countgym log."""
    from countgym.cli import main

    vf_eval = shutil.which("vf-eval", path=os.path.dirname(sys.executable))
    if vf_eval is None:
        pytest.skip("vf-eval is not installed next to this Python")
    with TestServer() as srv:
        proc = subprocess.run(
            [vf_eval, "countgym", "--env.taskset.dataset", str(tiny_dataset.root),
             "--env.taskset.arm", "tag-1", "-m", "blob", "--client.base-url", srv.base_url,
             "--client.api-key-var", "COUNTGYM_TEST_KEY", "-n", "3", "-r", "1",
             "-o", str(tmp_path / "vf"), "--run.name", "cg", "--no-rich", "--no-push"],
            cwd=tmp_path, capture_output=True, text=True, timeout=600,
            env={**os.environ, "COUNTGYM_TEST_KEY": "none", "PRIME_API_KEY": ""},
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "vf" / "cg"
    assert (run / "traces.jsonl").is_file()
    assert main(["audit", str(run), "--out", str(tmp_path / "audit"), "--no-judge"]) == 0
    with open(tmp_path / "audit" / "episodes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and all(r["model"] == "blob" and r["correct"] == "True" for r in rows)
    assert {r["stimulus_id"] for r in rows} == set(tiny_dataset.ids())
    # The audit of the same episodes as a countgym log gives the same table.
    [log] = (tmp_path / "audit" / "vf-eval").glob("*.jsonl")
    assert main(["audit", str(log), "--out", str(tmp_path / "audit2"), "--no-judge"]) == 0
    with open(tmp_path / "audit2" / "episodes.csv", newline="") as f:
        assert list(csv.DictReader(f)) == rows
    recs = {r.episode_id: r for r in read_records([log])}
    for row in rows:
        r = recs[row["episode_id"]]
        assert int(row["n_true"]) == r.truth.n and row["answer"] == str(r.answer)


def test_a_failed_model_call_ends_the_episode_as_an_error(tiny_dataset, monkeypatch) -> None:
    # The second request fails for good (401 is not retried): the first stimulus's episode ends
    # with end="error" naming the failure, scores 0, and the audit counts it as an error.
    env = load_environment(tiny_dataset, arm="tag", limit=1)
    with TestServer(schedule=["ok", "401"]) as srv:
        [t] = _traces(evaluate_sync(env, client=_config(srv, monkeypatch), model="blob"))
    rec = _record(t)
    assert not t.ok and t.errors
    assert rec.end == "error" and rec.error and rec.answer is None and len(rec.steps) == 2
    assert "401" in rec.error and t.reward == 0.0


def test_missing_extra_names_it(monkeypatch) -> None:
    import importlib

    from countgym.errors import MissingExtraError

    monkeypatch.setitem(sys.modules, "verifiers", None)
    monkeypatch.delitem(sys.modules, "countgym.integrations.verifiers", raising=False)
    with pytest.raises(MissingExtraError, match=r"\[verifiers\]"):
        importlib.import_module("countgym.integrations.verifiers")
