"""Every arm end to end: real env, runner episode loop, litellm backend, local test server."""

from __future__ import annotations

import pytest

pytest.importorskip("litellm")

from countgym.agents.arms import ARMS, arm_env_options, make_arm_policy  # noqa: E402
from countgym.agents.backends.litellm_backend import LiteLLMBackend  # noqa: E402
from countgym.runner import make_env, run_episode  # noqa: E402
from countgym.testing.server import TestServer  # noqa: E402

KEY = "sk-test-SECRET123"
pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")


@pytest.fixture(autouse=True)
def fake_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


@pytest.mark.slow
@pytest.mark.parametrize("arm", list(ARMS))
def test_arm_counts_the_tiny_dataset(arm: str, tiny_dataset) -> None:
    with TestServer() as srv:
        model = LiteLLMBackend("openai/blob", api_base=srv.base_url)
        for sid in tiny_dataset.ids():
            env = make_env(tiny_dataset, arm_env_options(arm), arm=arm, model=model.model)
            rec = run_episode(env, make_arm_policy(arm, model), sid, seed=0)
            assert rec.end == "answer" and rec.answer == rec.truth.n, (arm, sid, rec.error)
            if ARMS[arm].tools:  # the pointing arms leave audited tags
                assert len(rec.tags) == rec.truth.n
            assert rec.steps[0].usage is not None and rec.steps[0].usage.prompt_tokens > 0


def test_provider_faults_are_absorbed(tiny_dataset) -> None:
    faults = {"429": 0.15, "500": 0.1, "malformed": 0.05, "empty": 0.05, "drop": 0.05}
    with TestServer(faults=faults, seed=3, retry_after=0) as srv:
        model = LiteLLMBackend("openai/blob", api_base=srv.base_url, backoff_base_s=0.01, seed=0)
        for rep in range(3):
            for sid in tiny_dataset.ids():
                env = make_env(tiny_dataset, arm_env_options("tag"), arm="tag", model=model.model)
                rec = run_episode(env, make_arm_policy("tag", model), sid, seed=rep)
                assert rec.end == "answer" and rec.answer == rec.truth.n
        assert sum(srv.fault_counts.values()) > 0


def test_auth_failure_ends_the_episode_with_a_scrubbed_error(tiny_dataset) -> None:
    with TestServer(schedule=["401"]) as srv:
        model = LiteLLMBackend("openai/blob", api_base=srv.base_url)
        env = make_env(tiny_dataset, arm_env_options("tag"), arm="tag", model=model.model)
        rec = run_episode(env, make_arm_policy("tag", model), "four", seed=0)
    assert rec.end == "error" and rec.error is not None and "AuthenticationError" in rec.error
    assert KEY not in rec.model_dump_json()
