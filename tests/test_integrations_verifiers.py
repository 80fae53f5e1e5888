"""The verifiers adapter end to end: verifiers' own rollout loop and rubric, a real
``CountImageEnv`` per rollout, and the local OpenAI-compatible test server as the model."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

vf = pytest.importorskip("verifiers")
pytest.importorskip("datasets")
if not hasattr(vf, "MultiTurnEnv"):  # pragma: no cover - verifiers >= 0.4 dropped the classic API
    pytest.skip("verifiers without the classic MultiTurnEnv API", allow_module_level=True)

from verifiers.types import ClientConfig  # noqa: E402

from countgym.agents.arms import arm_env_options, make_arm_policy  # noqa: E402
from countgym.errors import MissingExtraError, UserError  # noqa: E402
from countgym.integrations.verifiers import load_environment  # noqa: E402
from countgym.logs import EpisodeRecord  # noqa: E402
from countgym.testing.server import TestServer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def _client(srv: TestServer, monkeypatch: pytest.MonkeyPatch) -> ClientConfig:
    monkeypatch.setenv("COUNTGYM_TEST_KEY", "none")
    return ClientConfig(api_base_url=srv.base_url, api_key_var="COUNTGYM_TEST_KEY", max_retries=0)


def _evaluate(env, srv, monkeypatch, **kw):
    return env.evaluate_sync(client=_client(srv, monkeypatch), model="blob",
                             state_columns=["countgym_record"], **kw)["outputs"]


def test_rollouts_run_the_real_tool_loop_and_score_with_countgym_rewards(tiny_dataset, monkeypatch) -> None:
    env = load_environment(tiny_dataset, arm="tag", reward="exact")
    assert isinstance(env, vf.MultiTurnEnv)
    with TestServer() as srv:
        outs = _evaluate(env, srv, monkeypatch, num_examples=3, rollouts_per_example=1)
        first_request = srv.last_request
    assert len(outs) == 3
    by_id = {o["info"]["stimulus_id"]: o for o in outs}
    assert set(by_id) == set(tiny_dataset.ids())
    for sid, o in by_id.items():
        n = tiny_dataset[sid].n
        assert o["answer"] == str(n) and o["reward"] == 1.0 and o["error"] is None
        m = o["metrics"]
        assert (m["exact"], m["neg_abs_error"], m["tags"], m["tool_calls"], m["answered"]) == (1.0, 0.0, n, 1, 1.0)
        assert m["audit"] == n  # every tag on target, no duplicates or phantoms
        assert o["num_turns"] == 2  # one tag call, one answer
        rec = EpisodeRecord.model_validate(o["countgym_record"])
        assert rec.end == "answer" and rec.answer == n and len(rec.tags) == n and rec.truth.n == n
    # The model saw the paper's system prompt and the image, not the truth.
    roles = [m["role"] for m in first_request["messages"]]
    assert roles[:2] == ["system", "user"]
    assert first_request["messages"][0]["content"].startswith("You are counting dots")


def test_same_episodes_as_countgyms_own_runner(tiny_dataset, monkeypatch) -> None:
    pytest.importorskip("litellm")
    from countgym.agents.backends.litellm_backend import LiteLLMBackend
    from countgym.runner import make_env, run_episode

    env = load_environment(tiny_dataset, arm="tag-1")
    with TestServer() as srv:
        outs = _evaluate(env, srv, monkeypatch, num_examples=3)
        # Context policy: only the two most recent images in a late tag-1 request.
        last = srv.last_request["messages"]
        n_images = sum(1 for m in last if isinstance(m["content"], list)
                       for p in m["content"] if p.get("type") == "image_url")
        model = LiteLLMBackend("openai/blob", api_base=srv.base_url)
        own = {sid: run_episode(make_env(tiny_dataset, arm_env_options("tag-1"), arm="tag-1", model="blob"),
                                make_arm_policy("tag-1", model), sid, seed=0) for sid in tiny_dataset.ids()}
    assert n_images == 2
    for o in outs:
        rec = EpisodeRecord.model_validate(o["countgym_record"])
        ref = own[rec.stimulus_id]
        assert rec.tags == ref.tags and rec.answer == ref.answer and rec.end == ref.end
        assert [s.action for s in rec.steps] == [s.action for s in ref.steps]
        assert o["num_turns"] == rec.truth.n + 1  # one point per call, then the answer


def test_wrong_answers_score_zero_with_the_chosen_reward(tiny_dataset, monkeypatch) -> None:
    # Budget 1 with the tag-1 protocol: one tag, then the budget-exhausted request; the
    # 'model' answers with the tags it placed (1), so every count above one is wrong.
    env = load_environment(tiny_dataset, arm="tag-1", budget=1, reward="neg_abs_error")
    with TestServer() as srv:
        outs = _evaluate(env, srv, monkeypatch, num_examples=3)
    for o in outs:
        n = int(o["answer"])
        assert o["metrics"]["exact"] == 0.0 and o["reward"] == -(n - 1) == o["metrics"]["neg_abs_error"]


def test_verifiers_load_environment_by_module_id(tiny_dataset) -> None:
    env = vf.load_environment("countgym.integrations.verifiers", dataset=tiny_dataset, arm="full")
    assert isinstance(env, vf.MultiTurnEnv) and len(env.get_eval_dataset()) == 3
    assert env.env_options["tools"] == ("tag", "crop", "erase", "grid")


def test_bad_arguments_are_one_line_user_errors(tiny_dataset) -> None:
    with pytest.raises(UserError, match="not a tool-loop arm"):
        load_environment(tiny_dataset, arm="direct")
    with pytest.raises(UserError, match="reward must be one of"):
        load_environment(tiny_dataset, reward="fancy")


def test_missing_extra_names_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "verifiers", None)
    monkeypatch.delitem(sys.modules, "countgym.integrations.verifiers", raising=False)
    with pytest.raises(MissingExtraError, match=r"\[verifiers\]'?$"):
        importlib.import_module("countgym.integrations.verifiers")


def test_native_tool_protocol_gives_the_same_episodes(tiny_dataset, monkeypatch) -> None:
    outs = {}
    for proto in ("json", "native"):
        env = load_environment(tiny_dataset, arm="tag", protocol=proto)
        with TestServer() as srv:
            outs[proto] = sorted(_evaluate(env, srv, monkeypatch, num_examples=3),
                                 key=lambda o: o["info"]["stimulus_id"])
            if proto == "native":
                assert [t["function"]["name"] for t in srv.last_request["tools"]] == ["tag", "answer"]
                assert [m["role"] for m in srv.last_request["messages"]][-2:] == ["tool", "user"]
    for j, n in zip(outs["json"], outs["native"], strict=True):
        rj = EpisodeRecord.model_validate(j["countgym_record"])
        rn = EpisodeRecord.model_validate(n["countgym_record"])
        assert rn.tags == rj.tags and rn.answer == rj.answer and n["reward"] == j["reward"] == 1.0
        assert rn.steps[0].tool_calls and not rj.steps[0].tool_calls
        assert rn.arm.options["protocol"] == "native"


# --- as verifiers' users run it: its loader by environment id, an AsyncOpenAI client, vf-eval ------
def test_vf_load_environment_by_the_package_name_and_an_asyncopenai_client(tiny_dataset) -> None:
    from openai import AsyncOpenAI

    env = vf.load_environment("countgym", dataset=str(tiny_dataset.root), arm="tag")
    assert isinstance(env, vf.MultiTurnEnv) and env.env_id == "countgym"
    with TestServer() as srv:
        client = AsyncOpenAI(base_url=srv.base_url, api_key="none", max_retries=0)
        outs = env.evaluate_sync(client=client, model="blob", num_examples=3, rollouts_per_example=2,
                                 state_columns=["countgym_record"])["outputs"]
    assert len(outs) == 6 and all(o["reward"] == 1.0 for o in outs)
    recs = [EpisodeRecord.model_validate(o["countgym_record"]) for o in outs]
    # Two rollouts of a stimulus are two repeats with distinct episode ids; the dataset is named
    # as given, so the audit can resolve it.
    assert len({r.episode_id for r in recs}) == 6
    assert sorted(r.repeat for r in recs if r.stimulus_id == "two") == [0, 1]
    assert {r.dataset for r in recs} == {str(tiny_dataset.root)}


def test_vf_eval_results_are_read_by_countgym_audit(tiny_dataset, tmp_path) -> None:
    """`vf-eval countgym ... -s -C countgym_record`, then `countgym audit` on its run folder."""
    import csv
    import os
    import shutil
    import subprocess

    from countgym.cli import main

    vf_eval = shutil.which("vf-eval", path=os.path.dirname(sys.executable))
    if vf_eval is None:
        pytest.skip("vf-eval is not installed next to this Python")
    args = json.dumps({"dataset": str(tiny_dataset.root), "arm": "tag"})
    with TestServer() as srv:
        proc = subprocess.run(
            [vf_eval, "countgym", "-a", args, "-m", "blob", "-b", srv.base_url, "-k", "COUNTGYM_TEST_KEY",
             "-n", "3", "-r", "1", "-s", "-C", "countgym_record", "-o", str(tmp_path / "vf")],
            cwd=tmp_path, capture_output=True, text=True, timeout=600,
            env={**os.environ, "COUNTGYM_TEST_KEY": "none"},
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    [results] = (tmp_path / "vf").rglob("results.jsonl")
    assert main(["audit", str(results.parent), "--out", str(tmp_path / "audit"), "--no-judge"]) == 0
    with open(tmp_path / "audit" / "episodes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and all(r["model"] == "blob" and r["correct"] == "True" for r in rows)
    assert {r["stimulus_id"] for r in rows} == set(tiny_dataset.ids())
