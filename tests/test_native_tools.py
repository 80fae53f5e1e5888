"""Native tool calling: the image env's tools as an OpenAI-style schema, the litellm backend and
the test server speaking it (and ``stream: true``), and the same log and audit as JSON-in-text."""

from __future__ import annotations

import json
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countgym.agents.arms import ChatPolicy, arm_env_options, make_arm_policy
from countgym.envs import native_tools as nt
from countgym.envs import templates as tpl
from countgym.envs.actions import Reply
from countgym.envs.image_env import CountImageEnv
from countgym.errors import UserError
from countgym.testing.server import TestServer

pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")


def _call(name: str, args: object, i: int = 0) -> dict:
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": arguments}}


# --------------------------------------------------------------------------- the environment
def test_schema_and_system_prompt_carry_the_papers_tool_lines(tiny_dataset) -> None:
    env = CountImageEnv(tiny_dataset, tools=("tag", "grid"), protocol="native")
    obs, _ = env.reset(seed=0, options={"stimulus_id": "two"})
    schema = env.tool_schema()
    assert [t["function"]["name"] for t in schema] == ["tag", "grid", "answer"]
    tag = schema[0]["function"]
    assert tag["description"].startswith("draw numbered tags (numbering continues from the last tag)")
    assert "Tag each dot exactly once, at its center." in tag["description"]
    assert tag["parameters"]["required"] == ["points"]
    assert "JSON action" not in obs["system"] and "call EXACTLY ONE of the provided tools" in obs["system"]
    assert obs["system"].startswith("You are counting dots in an image.") and "at most 6 tool calls" in obs["system"]
    assert obs["text"] == "Count the dots in this image."


def test_tool_calls_drive_the_episode(tiny_dataset) -> None:
    env = CountImageEnv(tiny_dataset, tools=("tag", "grid"), budget=2, protocol="native")
    env.reset(seed=0, options={"stimulus_id": "two"})
    # The first call runs; a second call in the same reply does not.
    obs, _, _, _, info = env.step(Reply(text="Two dots.", tool_calls=[
        _call("tag", {"points": [[65, 78], [520, 520]]}), _call("answer", {"count": 9}, 1)]))
    assert info["action"] == {"tool": "tag", "points": [[65.0, 78.0], [520.0, 520.0]], "mode": "append"}
    assert obs["text"].startswith("Tags 1..2 are now drawn")
    # Broken arguments are an invalid reply with the native re-issue message, never a crash.
    obs, _, term, trunc, info = env.step(Reply(text="", tool_calls=[_call("tag", '{"points": [[1,')]))
    assert obs["text"] == nt.NATIVE_INVALID.format(left=1) and not (term or trunc)
    assert info["parse_error"].startswith("invalid tool call")
    obs, *_ = env.step(Reply(text="", tool_calls=[_call("zoom", {"x": 1})]))
    assert obs["text"] == nt.NATIVE_INVALID.format(left=1)
    obs, *_ = env.step(Reply(text="", tool_calls=[_call("grid", {"on": True})]))
    assert obs["text"].endswith(nt.NATIVE_BUDGET_EXHAUSTED)
    _, reward, term, _, info = env.step(Reply(text="", tool_calls=[_call("answer", {"count": 2})]))
    assert term and reward == 1.0 and info["answer"] == 2
    rec = info["episode_record"]
    assert rec.steps[0].tool_calls[1]["function"]["name"] == "answer"  # logged, not executed
    assert rec.template_hash == nt.NATIVE_TEMPLATE_HASH != tpl.TEMPLATE_HASH
    assert rec.arm.options["protocol"] == "native"


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.one_of(st.sampled_from(["tag", "crop", "erase", "grid", "answer"]), st.text(max_size=8), st.none()),
       args=st.one_of(_JSONISH, st.text(max_size=40)))
def test_model_tool_calls_never_crash_the_env(tiny_dataset, name, args) -> None:
    env = CountImageEnv(tiny_dataset, tools=("tag", "crop", "erase", "grid"), protocol="native")
    env.reset(seed=0, options={"stimulus_id": "two"})
    call = {"id": "x", "type": "function", "function": {"name": name, "arguments": args}}
    _, _, _, _, info = env.step(Reply(text="", tool_calls=[call]))
    assert ("action" in info) != ("parse_error" in info)


def test_json_protocol_is_unchanged_by_the_option(tiny_dataset) -> None:
    env = CountImageEnv(tiny_dataset)
    obs, _ = env.reset(seed=0, options={"stimulus_id": "two"})
    assert "EXACTLY ONE JSON action as the last line" in obs["system"]
    assert "protocol" not in env.options()
    # Tool calls sent to a JSON-protocol env are logged but the text decides.
    *_, info = env.step(Reply(text='{"tool":"answer","count":2}', tool_calls=[_call("answer", {"count": 5})]))
    assert info["answer"] == 2


def test_native_is_for_the_tool_loop_only(tiny_dataset) -> None:
    with pytest.raises(ValueError, match="tool loop"):
        CountImageEnv(tiny_dataset, prompt="direct", protocol="native")
    with pytest.raises(ValueError, match="protocol"):
        CountImageEnv(tiny_dataset, protocol="xml")
    with pytest.raises(UserError, match="do not apply to arm 'direct'"):
        arm_env_options("direct", protocol="native")
    assert arm_env_options("tag", protocol="native")["protocol"] == "native"
    assert "protocol" not in arm_env_options("tag", protocol="json")


def test_cli_refuses_native_for_local_models(capsys) -> None:
    from countgym.cli import main

    assert main(["run", "--data", "dotarrays-xl", "--agent", "tag", "--model", "hf:/tmp/none",
                 "--protocol", "native"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a backend with tool calling" in err


def test_a_backend_without_tool_calling_is_refused(tiny_dataset) -> None:
    class TextOnly:
        model = "text-only"

        def complete(self, messages):  # noqa: ANN001 - a minimal ChatModel
            return Reply(text="")

    env = CountImageEnv(tiny_dataset, protocol="native")
    obs, _ = env.reset(seed=0)
    from countgym.envs.wrappers import task_of

    with pytest.raises(UserError, match="native tool protocol needs a backend with tool calling"):
        ChatPolicy(TextOnly()).reset(obs, task_of(env))


# --------------------------------------------------------------------------- end to end
pytest.importorskip("litellm")
from countgym.agents.backends.litellm_backend import LiteLLMBackend  # noqa: E402
from countgym.analysis.audit import audit_episodes  # noqa: E402
from countgym.runner import make_env, run_episode  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("arm", ["tag", "tag-1"])
def test_both_protocols_give_the_same_log_and_audit(arm, tiny_dataset) -> None:
    recs = {}
    with TestServer() as srv:
        model = LiteLLMBackend("openai/blob", api_base=srv.base_url)
        for proto in ("json", "native"):
            env = make_env(tiny_dataset, arm_env_options(arm, protocol=proto), arm=arm, model=model.model)
            recs[proto] = [run_episode(env, make_arm_policy(arm, model), sid, seed=0) for sid in tiny_dataset.ids()]
            if proto == "native":
                assert srv.last_request["tools"][0]["function"]["name"] == "tag"
                roles = [m["role"] for m in srv.last_request["messages"]]
                # The latest tool result's image follows it as a user turn (older ones may have
                # left the two-image context window).
                last_tool = len(roles) - 1 - roles[::-1].index("tool")
                assert roles[last_tool + 1 :] == ["user"]
    for j, n in zip(recs["json"], recs["native"], strict=True):
        assert n.end == j.end == "answer" and n.answer == j.answer == j.truth.n
        assert n.tags == j.tags and [s.action for s in n.steps] == [s.action for s in j.steps]
        assert all(s.tool_calls for s in n.steps) and not any(s.tool_calls for s in j.steps)
    cols = ["n_true", "answer", "correct", "n_tags", "on_target", "duplicate", "phantom", "omission",
            "tag_calls", "end"]
    a = audit_episodes(recs["json"], resolve=lambda _: tiny_dataset)[cols].reset_index(drop=True)
    b = audit_episodes(recs["native"], resolve=lambda _: tiny_dataset)[cols].reset_index(drop=True)
    assert a.equals(b) and a["on_target"].sum() == sum(len(r.tags) for r in recs["json"])


def test_cli_protocol_flag_runs_native_episodes(tiny_dataset, tmp_path, capsys) -> None:
    from countgym.cli import main
    from countgym.logs import read_records

    with TestServer() as srv:
        rc = main(["run", "--data", str(tiny_dataset.root), "--agent", "tag", "--model", "openai/blob",
                   "--agent-option", f"api_base={srv.base_url}", "--protocol", "native",
                   "--out", str(tmp_path), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    (log,) = tmp_path.glob("*.jsonl")
    recs = read_records([log])
    assert len(recs) == 3 and all(r.answer == r.truth.n and r.arm.options["protocol"] == "native" for r in recs)


# --------------------------------------------------------------------------- the test server
def _post(url: str, body: dict) -> tuple[str, bytes]:
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.headers["Content-Type"], r.read()


def test_server_streams_server_sent_events(tiny_dataset) -> None:
    env = CountImageEnv(tiny_dataset, protocol="native")
    obs, _ = env.reset(seed=0, options={"stimulus_id": "four"})
    policy = ChatPolicy("openai/blob")
    from countgym.envs.wrappers import task_of

    policy.reset(obs, task_of(env))
    from countgym.agents.backends.litellm_backend import to_openai_messages

    body = {"model": "blob", "messages": to_openai_messages(policy.request(obs)), "tools": env.tool_schema()}
    with TestServer() as srv:
        _, plain = _post(srv.base_url, body)
        kind, raw = _post(srv.base_url, {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert kind == "text/event-stream"
    events = [ln[len("data: "):] for ln in raw.decode().split("\n\n") if ln]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    calls = [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls") or []]
    whole = json.loads(plain)["choices"][0]
    assert content == whole["message"]["content"] and content.startswith("I can see 4")
    assert [c["function"] for c in calls] == [c["function"] for c in whole["message"]["tool_calls"]]
    assert json.loads(calls[0]["function"]["arguments"])["points"] and calls[0]["function"]["name"] == "tag"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "tool_calls" == whole["finish_reason"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] > 0


def test_openai_client_streaming_against_the_server() -> None:
    openai = pytest.importorskip("openai")
    with TestServer() as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="none")
        stream = client.chat.completions.create(
            model="blob", stream=True,
            messages=[{"role": "user", "content": "How many dots are in this image? Reply with only one line of the form 'ANSWER: <integer>'."}],
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "ANSWER: 0"
