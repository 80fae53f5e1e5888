"""The action parser: every rule of Appendix C, and fuzzing (it never raises)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from countgym.envs.actions import Answer, Crop, Erase, Grid, Reply, Tag
from countgym.envs.parser import parse_action

ALL = ("tag", "crop", "erase", "grid")


def test_last_json_action_wins() -> None:
    r = parse_action('first {"tool":"tag","points":[[1,2]]} then {"tool":"answer","count":3}', tools=ALL)
    assert r.action == Answer(count=3)


def test_thinking_then_json_last_line() -> None:
    text = 'I see dots at {left} and {right}.\nMaybe 4?\n{"tool":"tag","points":[[10,20],[30,40]]}'
    r = parse_action(text, tools=ALL)
    assert r.action == Tag(points=[(10, 20), (30, 40)])


def test_code_fences_tolerated() -> None:
    r = parse_action('```json\n{"tool": "grid", "on": true}\n```', tools=ALL)
    assert r.action == Grid(on=True)


def test_truncated_json_salvaged() -> None:
    r = parse_action('{"tool":"tag","points":[[10,20],[30,40],[50,6', tools=ALL)
    assert r.salvaged and r.action == Tag(points=[(10, 20), (30, 40)])


def test_truncated_replace_salvaged() -> None:
    r = parse_action('{"tool":"tag","mode":"replace","points":[[1,2],[3,4]', tools=ALL)
    assert r.action == Tag(points=[(1, 2), (3, 4)], mode="replace")


def test_out_of_range_dropped_and_margin_clipped() -> None:
    r = parse_action('{"tool":"tag","points":[[-5,0],[1005,1000],[-6,10],[10,1006],[500,500]]}', tools=ALL)
    assert r.action == Tag(points=[(0, 0), (1000, 1000), (500, 500)])
    assert r.dropped_range == 2


def test_non_numeric_nan_huge_rejected() -> None:
    r = parse_action('{"tool":"tag","points":[["a",1],[NaN,2],[1e308,5],[true,3],[7,8],[1,2,3]]}', tools=ALL)
    assert r.action == Tag(points=[(7, 8)])
    assert r.dropped_invalid == 4 and r.dropped_range == 1


def test_tool_not_enabled_is_invalid() -> None:
    r = parse_action('{"tool":"crop","box":[0,0,10,10]}', tools=("tag",))
    assert r.action is None and "not available" in (r.error or "")


def test_answer_always_enabled_and_validated() -> None:
    assert parse_action('{"tool":"answer","count":7}', tools=()).action == Answer(count=7)
    assert parse_action('{"tool":"answer","count":"7"}', tools=()).action == Answer(count=7)
    # The count grammar: a decimal is not an answer, even an integral one.
    for bad in ('7.0', '7.5', '-1', 'null', '"many"', 'true', '1e300', '"0x10"', '"-1"', '"1e20"', '1000001'):
        assert parse_action('{"tool":"answer","count":' + bad + '}', tools=()).action is None


def test_answer_line_without_json() -> None:
    assert parse_action("There are 12.\nANSWER: 12", tools=()).action == Answer(count=12)
    assert parse_action("ANSWER: 3 ... wait ANSWER: 4", tools=()).action == Answer(count=4)


def test_unknown_tool_and_garbage() -> None:
    assert parse_action('{"tool":"delete"}', tools=ALL).action is None
    assert parse_action("", tools=ALL).action is None
    assert parse_action("no action here", tools=ALL).error == "no JSON action found"


def test_crop_box_sorted_and_degenerate_rejected() -> None:
    assert parse_action('{"tool":"crop","box":[500,500,100,100]}', tools=ALL).action == Crop(box=(100, 100, 500, 500))
    assert parse_action('{"tool":"crop","box":[5,5,5,100]}', tools=ALL).action is None
    assert parse_action('{"tool":"crop","box":[1,2,3]}', tools=ALL).action is None


def test_erase_points_and_box() -> None:
    assert parse_action('{"tool":"erase","points":[[1,2]]}', tools=ALL).action == Erase(points=[(1, 2)])
    assert parse_action('{"tool":"erase","box":[0,0,50,60]}', tools=ALL).action == Erase(box=(0, 0, 50, 60))


def test_typed_actions_and_reply_go_through_same_rules() -> None:
    assert parse_action(Tag(points=[(2000, 5), (5, 5)]), tools=ALL).action == Tag(points=[(5, 5)])
    assert parse_action(Crop(box=(0, 0, 10, 10)), tools=("tag",)).action is None
    assert parse_action(Reply(text='{"tool":"answer","count":2}'), tools=()).action == Answer(count=2)
    assert parse_action(Reply(text="ignored", action=Answer(count=9)), tools=()).action == Answer(count=9)
    assert parse_action({"tool": "grid", "on": False}, tools=ALL).action == Grid(on=False)


def test_nested_tool_object_inside_other_json() -> None:
    r = parse_action('{"plan": {"tool":"answer","count":2}}', tools=ALL)
    assert r.action == Answer(count=2)


def test_adversarial_inputs_are_cheap_and_safe() -> None:
    for text in ["{" * 100_000, "[" * 100_000, '{"tool":"tag","points":' + "[[1,2]," * 50_000, "\x00\ud800"]:
        r = parse_action(text, tools=ALL)
        assert r.action is None or isinstance(r.action, Tag)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(["tool", "points", "box", "count", "on", "mode", "x"]), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_text_never_raises(text: str) -> None:
    r = parse_action(text, tools=ALL)
    assert (r.action is None) != (r.error is None)


@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({"tool": st.sampled_from(["tag", "crop", "erase", "grid", "answer", "zap"])}, optional={"points": json_values, "box": json_values, "count": json_values, "on": json_values, "mode": json_values}), st.text(max_size=30))
def test_fuzz_json_actions_never_raise_and_stay_in_frame(obj: dict, prefix: str) -> None:
    try:
        text = prefix + json.dumps(obj)
    except (ValueError, TypeError):
        return
    r = parse_action(text, tools=ALL)
    if isinstance(r.action, Tag | Erase) and r.action.points:
        assert all(0 <= x <= 1000 and 0 <= y <= 1000 for x, y in r.action.points)
    if isinstance(r.action, Answer):
        assert r.action.count >= 0
