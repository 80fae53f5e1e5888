"""The baseline arms: env options and ablations, each arm's policy against the local test server,
the tiles partition, mapping and de-duplication, and the reply parsers."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageDraw

from countgym.agents import arms
from countgym.agents.arms import (
    ARMS,
    ChatPolicy,
    ListPolicy,
    TilesPolicy,
    act_many,
    arm_backend_options,
    arm_env_options,
    dedup_points,
    make_arm_policy,
    parse_announced,
    parse_points,
    tile_boxes,
    tile_points_to_image,
    upscale,
)
from countgym.agents.backends.base import BaseChatModel, Message
from countgym.agents.base import Task
from countgym.envs import templates as T
from countgym.envs.actions import Answer, Reply, Tag
from countgym.errors import UserError
from countgym.logs import Usage

# --- helpers ---------------------------------------------------------------------------------------
DISCS = [(100, 100), (300, 120), (520, 400), (200, 600)]


def disc_image(
    centres: Sequence[tuple[int, int]] = DISCS, size: int = 768, r: int = 14
) -> np.ndarray:
    im = Image.new("RGB", (size, size), "white")
    d = ImageDraw.Draw(im)
    for x, y in centres:
        d.ellipse([x - r, y - r, x + r, y + r], fill="black")
    return np.asarray(im)


def norm(centres: Sequence[tuple[float, float]], size: int = 768) -> list[tuple[float, float]]:
    return [(x / size * 1000, y / size * 1000) for x, y in centres]


def close_sets(
    got: Sequence[Sequence[float]], want: Sequence[Sequence[float]], tol: float = 8
) -> bool:
    """Every wanted point has a distinct got point within tol (normalised units)."""
    if len(got) != len(want):
        return False
    free = [tuple(g) for g in got]
    for w in want:
        hit = next((g for g in free if abs(g[0] - w[0]) <= tol and abs(g[1] - w[1]) <= tol), None)
        if hit is None:
            return False
        free.remove(hit)
    return True


def task(tools: tuple[str, ...] = ("tag",), budget: int = 6) -> Task:
    return Task(obj="dots", obj_sing="dot", image_size=(768, 768), tools=tools, budget=budget)


class Scripted(BaseChatModel):
    """A ChatModel that replays fixed texts (for parser edge cases no server reply produces)."""

    model = "scripted"

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.requests: list[list[Message]] = []
        self.batches: list[int] = []

    def complete(self, messages: list[Message]) -> Reply:
        self.requests.append(messages)
        return Reply(
            text=self.texts.pop(0), usage=Usage(prompt_tokens=10, completion_tokens=5), cost=0.5
        )

    def complete_batch(self, batch: Sequence[list[Message]]) -> list[Reply]:
        self.batches.append(len(batch))
        return [self.complete(m) for m in batch]


# --- arm definitions and ablations -----------------------------------------------------------------
def test_arm_table() -> None:
    assert list(ARMS) == ["direct", "cot", "list", "tag", "tag+crop", "full", "tiles", "tag-1"]
    assert arm_env_options("tag") == {
        "tools": ("tag",),
        "budget": 6,
        "verify": True,
        "numbered": True,
        "one_point_per_call": False,
        "order": None,
        "perturb": None,
        "prompt": "tools",
    }
    assert arm_env_options("full")["tools"] == ("tag", "crop", "erase", "grid")
    assert arm_env_options("tag+crop")["tools"] == ("tag", "crop")
    one = arm_env_options("tag-1")
    assert one["budget"] == 80 and one["one_point_per_call"] and one["tools"] == ("tag",)
    assert (
        arm_env_options("direct")["prompt"] == "direct" and arm_env_options("direct")["tools"] == ()
    )
    assert arm_env_options("cot")["prompt"] == "cot"
    assert arm_env_options("list")["prompt"] == "list" and arm_env_options("list")["tools"] == (
        "tag",
    )
    assert arm_env_options("tiles")["prompt"] == "tiles"


def test_ablations() -> None:
    o = arm_env_options(
        "tag",
        verify=False,
        numbered=False,
        extra_tools=("grid",),
        budget=12,
        order="reverse",
        perturb="remove",
    )
    assert o["verify"] is False and o["numbered"] is False and o["tools"] == ("tag", "grid")
    assert o["budget"] == 12 and o["order"] == "reverse" and o["perturb"] == "remove"
    assert arm_env_options("tag+crop", extra_tools=("erase",))["tools"] == ("tag", "crop", "erase")
    assert arm_env_options("tag", thinking=False) == arm_env_options("tag")
    assert arm_backend_options("tag", thinking=False) == {"thinking": False}
    assert arm_backend_options("direct", thinking=True) == {}
    # Values that change nothing are fine on any arm; real tool-loop ablations are not.
    assert arm_env_options("direct", verify=False) == arm_env_options("direct")
    for bad in (
        {"verify": True},
        {"extra_tools": ("grid",)},
        {"order": "reading"},
        {"perturb": "add"},
        {"budget": 3},
        {"numbered": False},
    ):
        with pytest.raises(UserError, match="do not apply"):
            arm_env_options("list", **bad)
    with pytest.raises(UserError, match="unknown arm"):
        arm_env_options("tag2")
    with pytest.raises(UserError, match="extra tool"):
        arm_env_options("tag", extra_tools=("zoom",))
    with pytest.raises(UserError, match="order"):
        arm_env_options("tag", order="spiral")
    with pytest.raises(UserError, match="perturb"):
        arm_env_options("tag", perturb="swap")
    with pytest.raises(UserError, match="budget"):
        arm_env_options("tag", budget=0)


def test_make_arm_policy_picks_the_policy_kind() -> None:
    m = Scripted([])
    assert type(make_arm_policy("tag", m)) is ChatPolicy
    assert type(make_arm_policy("direct", m)) is ChatPolicy
    assert type(make_arm_policy("list", m)) is ListPolicy
    assert type(make_arm_policy("tiles", m)) is TilesPolicy
    with pytest.raises(TypeError):
        make_arm_policy("tag", m, thinking=False)


# --- each arm against the test server --------------------------------------------------------------
litellm_needed = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("litellm")
    from countgym.testing.server import TestServer

    with TestServer() as srv:
        yield srv


@pytest.fixture
def model(server, monkeypatch: pytest.MonkeyPatch):
    from countgym.agents.backends.litellm_backend import LiteLLMBackend

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET123")
    return LiteLLMBackend("openai/blob", api_base=server.base_url)


@litellm_needed
@pytest.mark.parametrize(("arm", "template"), [("direct", T.DIRECT), ("cot", T.COT)])
def test_single_call_arms(model, arm: str, template: str) -> None:
    policy = make_arm_policy(arm, model)
    obs = {"image": disc_image(), "text": template.format(obj="dots"), "system": ""}
    policy.reset(obs, task(()))
    reply = policy.act(obs)
    assert isinstance(reply, Reply) and reply.action is None and reply.error is None
    assert parse_announced(reply.text) == 4 and reply.text.splitlines()[-1] == "ANSWER: 4"
    assert reply.usage is not None and reply.usage.prompt_tokens > 0


@litellm_needed
@pytest.mark.parametrize("arm", ["tag", "tag+crop", "full"])
def test_tool_loop_arms(model, server, arm: str) -> None:
    opts = arm_env_options(arm)
    policy = make_arm_policy(arm, model)
    img = disc_image()
    system = T.system_prompt("dots", "dot", opts["tools"], opts["budget"])
    obs = {"image": img, "text": T.first_user_message("dots", "dot"), "system": system}
    policy.reset(obs, task(opts["tools"]))
    first = policy.act(obs)
    action = json.loads(first.text.splitlines()[-1])
    assert action["tool"] == "tag" and close_sets(action["points"], norm(DISCS))
    assert server.last_request["messages"][0] == {"role": "system", "content": system}
    verify = T.VERIFY.format(a=1, b=4, obj_sing="dot", obj="dots", left=5)
    second = policy.act({"image": img, "text": verify, "system": ""})
    assert json.loads(second.text.splitlines()[-1]) == {"tool": "answer", "count": 4}
    roles = [m["role"] for m in server.last_request["messages"]]
    assert roles == ["system", "user", "assistant", "user"]


@litellm_needed
def test_tag1_arm_one_point_per_call_and_context_policy(model, server) -> None:
    opts = arm_env_options("tag-1")
    policy = make_arm_policy("tag-1", model)
    img = disc_image()
    first_text = T.first_user_message("dots", "dot", one_point_per_call=True)
    obs = {"image": img, "text": first_text, "system": T.system_prompt("dots", "dot", ("tag",), 80)}
    policy.reset(obs, task(opts["tools"], 80))
    points = []
    for k in range(10):
        reply = policy.act(obs)
        action = json.loads(reply.text.splitlines()[-1])
        if action["tool"] == "answer":
            break
        assert len(action["points"]) == 1
        points += action["points"]
        obs = {
            "image": img.copy(),
            "text": T.VERIFY.format(a=k + 1, b=k + 1, obj_sing="dot", obj="dots", left=79 - k),
            "system": "",
        }
    assert action == {"tool": "answer", "count": 4}
    assert close_sets(points, norm(DISCS))
    # Five user turns were sent; the request kept only the last two images.
    sent = server.last_request["messages"]
    images = [
        p
        for m in sent
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "image_url"
    ]
    omitted = [
        p
        for m in sent
        if isinstance(m["content"], list)
        for p in m["content"]
        if p.get("text") == T.OMITTED_IMAGE
    ]
    assert len(images) == 2 and len(omitted) == 3
    # The policy keeps no pixels beyond the window either (memory stays flat over long loops).
    kept = [p for m in policy.history for p in m["content"] if p["type"] == "image"]
    assert len(kept) == 2


@litellm_needed
def test_list_arm_submits_points_then_the_announced_count(model) -> None:
    policy = make_arm_policy("list", model)
    obs = {"image": disc_image(), "text": T.LIST.format(obj="dots", obj_sing="dot"), "system": ""}
    policy.reset(obs, task())
    first = policy.act(obs)
    assert isinstance(first.action, Tag) and close_sets(first.action.points, norm(DISCS))
    assert first.usage is not None and first.usage.prompt_tokens > 0
    second = policy.act({"image": obs["image"], "text": "Tags 1..4 are now drawn.", "system": ""})
    assert second.action == Answer(count=4) and second.text == first.text
    assert second.usage is None and second.cost is None


def test_list_without_answer_line_leaves_it_to_the_env() -> None:
    policy = ListPolicy(Scripted(['{"points": [[10, 20], [30, 40]]}']))
    obs = {"image": disc_image(), "text": "list", "system": ""}
    policy.reset(obs, task())
    assert policy.act(obs).action == Tag(points=[(10, 20), (30, 40)])
    later = policy.act(obs)
    assert later.action is None and later.text == '{"points": [[10, 20], [30, 40]]}'
    # No points line at all: the text goes to the env as is (its ANSWER line still answers).
    p2 = ListPolicy(Scripted(["I think there are five.\nANSWER: 5"]))
    p2.reset(obs, task())
    assert p2.act(obs).action is None


# --- tiles -----------------------------------------------------------------------------------------
def test_tile_boxes_overlap_ten_percent_of_the_side() -> None:
    boxes = tile_boxes(768, 768)
    assert boxes == [(0, 0, 422, 422), (346, 0, 768, 422), (0, 346, 422, 768), (346, 346, 768, 768)]
    assert boxes[0][2] - boxes[1][0] == pytest.approx(0.1 * 768, abs=1)
    wide = tile_boxes(1000, 500, overlap=0.2)
    assert wide == [
        (0, 0, 600, 300),
        (400, 0, 1000, 300),
        (0, 200, 600, 500),
        (400, 200, 1000, 500),
    ]


def test_upscale_like_the_env_crop() -> None:
    assert upscale(np.zeros((422, 422, 3), np.uint8)).shape == (768, 768, 3)
    assert upscale(np.zeros((200, 600, 3), np.uint8)).shape == (341, 1024, 3)  # long side capped
    assert upscale(np.zeros((800, 900, 3), np.uint8)).shape == (800, 900, 3)


def test_tile_points_map_to_the_full_image() -> None:
    box = (346, 0, 768, 422)
    got = tile_points_to_image([(0, 0), (500, 500), (1000, 1000), (1200, 50), (-3, 10)], box)
    assert got == [(346, 0), (557, 211), (768, 422)]


def test_dedup_merges_across_tiles_only() -> None:
    # Tile 0 and tile 1 see one object 4 px apart: one object at the mean.
    assert dedup_points([[(100, 100)], [(104, 100)]], radius=19) == [(102, 100)]
    # Two points of the same tile are distinct objects even when close.
    assert len(dedup_points([[(100, 100), (104, 100)]], radius=19)) == 2
    # Far apart: distinct.
    assert len(dedup_points([[(100, 100)], [(130, 100)]], radius=19)) == 2
    # One object seen by all four tiles merges once per tile; a second close object of tile 1
    # cannot join the same union point (one-to-one across tiles).
    groups = [[(384, 384)], [(386, 383), (392, 390)], [(383, 386)], [(385, 385)]]
    merged = dedup_points(groups, radius=19)
    assert len(merged) == 2


@litellm_needed
def test_tiles_arm_counts_an_overlap_object_once(model, server) -> None:
    # 768 px: tiles span x (and y) in [0, 422] and [346, 768]. (384, 100) lies in the overlap of
    # the two top tiles, (384, 384) in all four, (415, 250) is cut by tile 1's border and whole
    # in tile 2; the other three lie in one tile each. Six objects.
    centres = [(384, 100), (384, 384), (415, 250), (100, 100), (650, 650), (100, 650)]
    policy = make_arm_policy("tiles", model)
    obs = {"image": disc_image(centres), "text": T.FIRST_USER.format(obj="dots"), "system": ""}
    policy.reset(obs, task())
    before = server.request_count
    tag = policy.act(obs)
    assert server.request_count - before == 4
    per_tile = [parse_announced(block) for block in tag.text.split("\n\n")]
    assert sum(per_tile) == 11  # the naive union double counts 5 objects
    assert isinstance(tag.action, Tag) and close_sets(tag.action.points, norm(centres))
    assert tag.usage is not None and tag.usage.prompt_tokens > 4 * 85
    answer = policy.act({"image": obs["image"], "text": "Tags 1..6 are now drawn.", "system": ""})
    assert answer.action == Answer(count=6) and answer.usage is None


def test_tiles_sends_the_tile_prompt_on_upscaled_crops_and_sums_usage() -> None:
    m = Scripted(
        ['1\n{"points": [[500, 500]]}\nANSWER: 1', '{"points": []}\nANSWER: 0', "none", "ANSWER: 0"]
    )
    policy = TilesPolicy(m)
    obs = {"image": disc_image(), "text": T.FIRST_USER.format(obj="dots"), "system": ""}
    policy.reset(obs, task())
    tag = policy.act(obs)
    assert m.batches == [4]
    sent = m.requests[0][0]["content"]
    assert sent[0]["image"].shape == (768, 768, 3)
    assert sent[1]["text"] == T.TILE.format(obj="dots", obj_sing="dot")
    assert tag.usage == Usage(prompt_tokens=40, completion_tokens=20) and tag.cost == 2.0
    assert tag.action == Tag(points=[(211 / 768 * 1000, 211 / 768 * 1000)])


def test_tiles_tile_error_ends_the_episode() -> None:
    class Failing(Scripted):
        def complete(self, messages: list[Message]) -> Reply:
            return Reply(text="", error="AuthenticationError: nope")

    policy = TilesPolicy(Failing([]))
    obs = {"image": disc_image(), "text": "", "system": ""}
    policy.reset(obs, task())
    reply = policy.act(obs)
    assert reply.error is not None and reply.error.startswith("tile 1:") and reply.action is None


# --- parsers ---------------------------------------------------------------------------------------
def test_parse_points_and_answer() -> None:
    assert parse_points('think\n{"points": [[1, 2], [3.5, 4]]}\nANSWER: 2') == [(1, 2), (3.5, 4)]
    assert parse_points('{"points": [{"x": 5, "y": 6}, [7], "bad", [NaN, 1]]}') == [(5, 6)]
    # Truncated JSON: the pairs are salvaged.
    assert parse_points('{"points": [[10, 20], [30, 40], [50,') == [(10, 20), (30, 40)]
    assert parse_points("no points here\nANSWER: 3") is None
    assert parse_points('{"points": []}') == []
    assert parse_announced("a\nANSWER: 12\n") == 12
    assert parse_announced("ANSWER: 3\nActually ANSWER: **4**") == 4
    assert parse_announced("answer: -2") is None  # the count grammar: a negative is no count
    assert parse_announced("ANSWER: 3 or 4") is None and parse_announced("ANSWER: twenty one") == 21
    assert parse_announced("no number") is None


@given(st.text(max_size=300))
def test_parsers_never_raise(text: str) -> None:
    pts = parse_points(text)
    assert pts is None or all(len(p) == 2 for p in pts)
    parse_announced(text)


def test_act_many_batches_chat_policies_sharing_a_model() -> None:
    m = Scripted(["a", "b", "c"])
    policies = [
        ChatPolicy(m),
        ChatPolicy(m),
        ListPolicy(Scripted(['{"points": [[1, 1]]}\nANSWER: 1'])),
    ]
    obs = {"image": disc_image(), "text": "hi", "system": "sys"}
    for p in policies:
        p.reset(obs, task())
    out = act_many(policies, [obs, obs, obs])
    assert m.batches == [2] and [r.text for r in out[:2]] == ["a", "b"]
    assert isinstance(out[2].action, Tag)
    assert policies[0].history[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}],
    }


def test_module_constants_documented() -> None:
    assert arms.TILE_OVERLAP == 0.10 and arms.DEDUP_RADIUS == 0.025


def test_tiles_of_a_stimulus_view_are_upscaled_and_encoded_once(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every model's tiles episode on a stimulus sends the same four tiles: for a data-URL
    backend they are made once per process, the very bytes an encoding of the upscaled array
    gives; an array that is no stimulus view, or a backend that takes pixels, is upscaled anew."""
    from countgym.agents.backends.base import EncodedImage, png_data_url
    from countgym.envs.originals import load_original
    from countgym.stimulus import Dataset, Stimulus, write_manifest

    (tmp_path / "images").mkdir()
    Image.fromarray(disc_image()).save(tmp_path / "images" / "a.png")
    write_manifest(tmp_path, [Stimulus(id="a", image="images/a.png", n=4, obj="dots", obj_sing="dot", points=None)])
    ds = Dataset(tmp_path)
    calls: list[tuple[int, ...]] = []
    real = arms.upscale
    monkeypatch.setattr(arms, "upscale", lambda image: calls.append(image.shape) or real(image))

    class DataURLs(Scripted):
        sends_data_urls = True

    def tiles(image: np.ndarray, model: Scripted) -> list[object]:
        policy = TilesPolicy(model)
        obs = {"image": image, "text": T.FIRST_USER.format(obj="dots"), "system": ""}
        policy.reset(obs, task())
        policy.act(obs)
        return [r[0]["content"][0]["image"] for r in model.requests]

    first = tiles(load_original(ds, ds["a"], 768).first_view(), DataURLs(["ANSWER: 0"] * 4))
    again = tiles(load_original(ds, ds["a"], 768).first_view(), DataURLs(["ANSWER: 0"] * 4))
    assert len(calls) == 4 and all(isinstance(t, EncodedImage) for t in first)
    assert [t.url for t in again] == [t.url for t in first]
    boxes = arms.tile_boxes(768, 768, arms.TILE_OVERLAP)
    view = np.asarray(disc_image())
    assert [t.url for t in first] == [png_data_url(real(view[y0:y1, x0:x1])) for x0, y0, x1, y1 in boxes]
    tiles(np.array(view), DataURLs(["ANSWER: 0"] * 4))  # no stimulus view: no key to keep it under
    plain = tiles(load_original(ds, ds["a"], 768).first_view(), Scripted(["ANSWER: 0"] * 4))
    assert len(calls) == 12 and all(isinstance(t, np.ndarray) for t in plain)
