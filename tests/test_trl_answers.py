"""One reader everywhere: the TRL tool adapter and the verifiers adapters read a model's ``answer``
(and ``grid``) arguments with the environment's own grammar (``countgym.envs.extract.parse_count``,
a JSON boolean for ``on``), so a value is rewarded the same on every path."""

from __future__ import annotations

from typing import Any

import pytest

from countgym.envs.extract import parse_count
from countgym.envs.image_env import CountImageEnv
from countgym.integrations import trl as ctrl

# (model-written value, count the environment reads or None). Stimulus "two" has 2 discs.
KNOWN: list[tuple[Any, int | None]] = [
    (2, 2), ("2", 2), (" 2 ", 2), ("+2", 2), ("two", 2), (30, 30), ("1,000", 1000),
    (30.7, None), (2.0, None), (True, None), (False, None), (b"12", None), ("1_2", None),
    ("12.5", None), ("-2", None), (-2, None), ("2 or 3", None), ("", None), (None, None), ([2], None),
    ({"n": 2}, None),
]  # fmt: skip


@pytest.mark.parametrize(("value", "read"), KNOWN)
def test_trl_answer_reads_the_count_with_the_env_grammar(tiny_dataset, value: Any, read: int | None) -> None:
    assert parse_count(value)[0] == read  # the table is the environment's own reading
    env = ctrl.environment_factory(tiny_dataset, tools=("tag",), reward="exact")()
    env.reset(stimulus_id="two")
    out = env.answer(count=value)
    if read is None:
        # An invalid reply, as on every other path: no count, a re-issue request, episode goes on.
        assert not env.ended and isinstance(out, list)
        assert "valid tool call" in out[1]["text"]
        assert env.env._steps[-1].parse_error and env.env._steps[-1].action is None
        assert env.get_reward() == 0.0 and env.records[-1].answer is None
    else:
        assert env.ended and env.records[-1].answer == read and env.records[-1].end == "answer"
        assert env.get_reward() == float(read == 2)


def test_trl_answer_30_7_is_not_rewarded_as_30(tiny_dataset) -> None:
    env = ctrl.environment_factory(tiny_dataset, tools=("tag",), reward="neg_abs_error")()
    env.reset(stimulus_id="two")
    env.answer(count=30.7)
    assert env.get_reward() == -2.0  # no count announced: -n, not -|30 - 2|
    env.reset(stimulus_id="two")
    env.answer(count=30)
    assert env.get_reward() == -28.0


@pytest.mark.parametrize(("value", "on"), [(True, True), (False, False), ("false", None), ("true", None),
                                           (0, None), (1, None), (None, None)])
def test_trl_grid_reads_a_json_boolean(tiny_dataset, value: Any, on: bool | None) -> None:
    env = ctrl.environment_factory(tiny_dataset, tools=("grid",), reward="exact")()
    env.reset(stimulus_id="two")
    env.grid(on=value)
    step = env.env._steps[-1]
    if on is None:
        assert step.action is None and step.parse_error and env.env.state.grid is False
    else:
        assert step.action == {"tool": "grid", "on": on} and env.env.state.grid is on


def test_trl_tool_env_speaks_the_native_protocol(tiny_dataset) -> None:
    """Re-issue and budget messages ask for a tool call (TRL's loop is native function calling)."""
    env = ctrl.environment_factory(tiny_dataset, tools=("tag",), budget=1, reward="exact")()
    env.reset(stimulus_id="two")
    out = env.tag(points=[[65, 78]])
    assert "Call answer with the count" in out[1]["text"] and '{"tool"' not in out[1]["text"]
    assert env.env.episode_record().model_dump().get("protocol") in (None, "native")


def _native_reply_env(tiny_dataset, arguments: dict[str, Any], reply_of: Any, message: Any) -> CountImageEnv:
    env = CountImageEnv(tiny_dataset, tools=("tag", "grid"), protocol="native", reward="exact")
    env.reset(options={"stimulus_id": "two"})
    env.step(reply_of(message(arguments)))
    return env


@pytest.mark.parametrize(("value", "read"), KNOWN)
def test_verifiers_classic_reads_the_count_with_the_env_grammar(tiny_dataset, value: Any, read: int | None) -> None:
    pytest.importorskip("verifiers")  # the adapter module imports without it, but cannot run
    vf_classic = pytest.importorskip("countgym.integrations.vf_classic", exc_type=ImportError)
    import json

    try:
        args = json.dumps({"count": value})
    except TypeError:
        pytest.skip("not JSON: a chat message cannot carry it")

    def message(_: Any) -> dict[str, Any]:
        return {"role": "assistant", "content": "",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "answer", "arguments": args}}]}

    env = _native_reply_env(tiny_dataset, {}, vf_classic._reply_of, message)
    assert env.state.answer == read
    assert env.state.end == ("answer" if read is not None else None)


def test_verifiers_v1_reads_the_count_with_the_env_grammar(tiny_dataset) -> None:
    pytest.importorskip("verifiers")
    from countgym.integrations import vf_version

    if not vf_version.uses_v1():
        pytest.skip("verifiers < 0.4: the v1 adapter needs 0.4 (CI runs it in its verifiers 0.4 environment)")
    vf_v1 = pytest.importorskip("countgym.integrations.vf_v1", exc_type=ImportError)
    from types import SimpleNamespace as NS

    for value, read in KNOWN:
        if isinstance(value, bytes | dict | list) or value is None:
            continue
        call = NS(id="c1", name="answer", arguments={"count": value})
        msg = NS(role="assistant", content="", tool_calls=[call])
        env = CountImageEnv(tiny_dataset, tools=("tag",), protocol="native", reward="exact")
        env.reset(options={"stimulus_id": "two"})
        env.step(vf_v1.reply_of([msg]))
        assert env.state.answer == read, value


def test_use_tool_images_drops_token_type_ids_only_where_forward_does_not_take_them() -> None:
    class NoTypes:
        def forward(self, input_ids: Any = None, **kwargs: Any) -> None: ...

        def generate(self, **kwargs: Any) -> dict[str, Any]:
            return kwargs

    class Types(NoTypes):
        def forward(self, input_ids: Any = None, token_type_ids: Any = None, **kwargs: Any) -> None: ...

    plain = ctrl.use_tool_images(NoTypes())
    assert plain.generate(input_ids=1, token_type_ids=2, pixel_values=3) == {"input_ids": 1, "pixel_values": 3}
    assert ctrl.use_tool_images(plain) is plain and plain.generate(token_type_ids=2) == {}  # wrapped once
    typed = ctrl.use_tool_images(Types())
    assert typed.generate(input_ids=1, token_type_ids=2) == {"input_ids": 1, "token_type_ids": 2}


def test_every_trl_tool_result_carries_the_working_image(tiny_dataset) -> None:
    """TRL 1.16 fails on a round of text-only tool results with SmolVLM-style processors."""
    env = ctrl.environment_factory(tiny_dataset, tools=("tag", "grid"), reward="exact")()
    env.reset(stimulus_id="two")
    results = [env.grid(on="yes"), env.tag(points=[[65, 78]]), env.answer(count=2), env.answer(count=2)]
    assert all(r[0]["type"] == "image" and r[1]["type"] == "text" for r in results)
    assert results[2][1]["text"] == "Done." and results[3][1]["text"] == "The episode has ended."
