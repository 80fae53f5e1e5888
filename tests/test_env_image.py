"""The image tool environment: protocol rules, rendering goldens, spaces, determinism, vector envs."""

from __future__ import annotations

import hashlib

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from countgym.envs import templates as tpl
from countgym.envs.actions import Answer, Reply
from countgym.envs.image_env import CountImageEnv
from countgym.envs.render import crop_size, render_working_image

ALL = ("tag", "crop", "erase", "grid")


def sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def tag_json(points: list[list[float]], **extra: str) -> str:
    import json

    return json.dumps({"tool": "tag", "points": points, **extra})


@pytest.fixture
def env(tiny_dataset):
    return CountImageEnv(tiny_dataset, tools=ALL)


def test_check_env_tiny(tiny_dataset) -> None:
    check_env(CountImageEnv(tiny_dataset, tools=ALL), skip_render_check=True)


def test_first_observation(env) -> None:
    obs, info = env.reset(seed=0, options={"stimulus_id": "four"})
    assert obs["image"].shape == (768, 768, 3) and obs["image"].dtype == np.uint8
    assert obs["text"] == "Count the dots in this image."
    assert obs["system"].startswith("You are counting dots in an image.")
    assert "at most 6 tool calls" in obs["system"]
    assert env.observation_space.contains(obs)
    assert "truth" not in info and "stimulus_id" not in info


def test_tag_step_message_and_pixels(env) -> None:
    env.reset(seed=0, options={"stimulus_id": "four"})
    obs, r, term, trunc, info = env.step('Think.\n{"tool":"tag","points":[[130.2,130.2],[390.6,260.4]]}')
    assert not (term or trunc) and r == 0.0
    assert obs["text"].startswith("Tags 1..2 are now drawn (red dot = exact point")
    assert obs["text"].endswith("Tool calls left: 5.")
    want = [130.2 * 0.768, 130.2 * 0.768, 390.6 * 0.768, 260.4 * 0.768]
    assert np.ravel(info["tags_added"]).tolist() == pytest.approx(want)
    x, y = (round(v) for v in info["tags_added"][0])
    assert tuple(obs["image"][y, x]) == (230, 0, 0)  # the red disc sits at the exact point
    obs, *_ = env.step('{"tool":"tag","points":[[651,781]]}')
    assert obs["text"].startswith("Tags 3..3 are now drawn")


def test_no_truth_before_end(env) -> None:
    obs, info = env.reset(seed=0, options={"stimulus_id": "row"})
    for reply in ['{"tool":"tag","points":[[100,100]]}', "junk"]:
        obs, _, term, trunc, info = env.step(reply)
        assert not (term or trunc)
        assert not {"truth", "stimulus_id", "episode_record", "answer"} & set(info)
    obs, _, term, trunc, info = env.step('{"tool":"answer","count":10}')
    assert term and info["truth"] == {"n": 10} and info["stimulus_id"] == "row"
    assert info["episode_record"].truth.n == 10


def test_budget_exhaustion_then_answer(env) -> None:
    env.reset(seed=0, options={"stimulus_id": "four"})
    for i in range(6):
        obs, _, term, trunc, _ = env.step(tag_json([[10 + i, 10]]))
        assert not (term or trunc)
    assert obs["text"].endswith(tpl.BUDGET_EXHAUSTED.format())
    obs, r, term, trunc, info = env.step('{"tool":"answer","count":4}')
    assert term and not trunc and info["answer"] == 4 and info["end"] == "answer" and r == 1.0


def test_budget_exhaustion_then_no_number_uses_tag_count(env) -> None:
    env.reset(seed=0, options={"stimulus_id": "four"})
    for _ in range(6):
        env.step(tag_json([[10, 10], [20, 20]]))
    obs, r, term, trunc, info = env.step('{"tool":"tag","points":[[500,500]]}')
    assert trunc and not term and info["end"] == "budget" and info["answer"] == 12 and r == 0.0
    assert len(env.episode_record().tags) == 12  # the extra tag call was not applied


def test_invalid_replies_get_three_reissues_and_the_fourth_ends_the_episode(env) -> None:
    """Give the Model a Finger, App. C: re-issue "at most three times"."""
    env.reset(seed=0, options={"stimulus_id": "four"})
    obs, _, term, trunc, _ = env.step("no json")
    assert obs["text"] == tpl.INVALID.format(left=6) and not trunc
    env.step("still none")
    env.step(tag_json([[1, 1]]))  # a valid reply resets the streak
    for bad in ("x", "y", "z"):  # three invalid in a row: each is answered with the re-issue
        obs, _, term, trunc, _ = env.step(bad)
        assert obs["text"] == tpl.INVALID.format(left=5) and not (term or trunc)
    obs, r, term, trunc, info = env.step("w")  # the fourth ends the episode
    assert trunc and not term and info["end"] == "invalid" and "answer" not in info and r == 0.0
    assert obs["text"] == ""  # no further re-issue request is sent
    steps = env.episode_record().steps
    assert [s.message == tpl.INVALID.format(left=5) for s in steps[3:]] == [True, True, True, False]


def test_reissue_count_of_a_policy_that_never_replies_validly(tiny_dataset) -> None:
    """Exactly three re-issue requests, then the episode ends with no answer."""
    e = CountImageEnv(tiny_dataset, tools=("tag",))
    e.reset(seed=0, options={"stimulus_id": "four"})
    seen = []
    while True:
        obs, _, term, trunc, info = e.step("I think there are some dots.")
        seen.append(obs["text"])
        if term or trunc:
            break
    assert len(seen) == 4 and seen.count(tpl.INVALID.format(left=6)) == 3
    assert info["episode_record"].end == "invalid" and info["episode_record"].answer is None


def test_disabled_tool_is_an_invalid_reply(tiny_dataset) -> None:
    e = CountImageEnv(tiny_dataset, tools=("tag",))
    e.reset(seed=0, options={"stimulus_id": "four"})
    obs, *_ , info = e.step('{"tool":"crop","box":[0,0,500,500]}')
    assert info["parse_error"] and "action" not in info
    assert obs["text"].startswith("Your last line was not a valid JSON action")


def test_caps_per_call_and_per_trajectory(env) -> None:
    env.reset(seed=0, options={"stimulus_id": "four"})
    pts = [[i % 1000, (7 * i) % 1000] for i in range(150)]
    obs, *_, info = env.step(tag_json(pts))
    assert len(info["tags_added"]) == 100 and info["tags_dropped"] == 50
    assert "Only the first 100 points of a tag call are drawn; 50 point(s) were not drawn." in obs["text"]
    env.step(tag_json(pts[:100]))
    env.step(tag_json(pts[:100]))
    obs, *_, info = env.step(tag_json(pts[:100]))
    assert len(env.state.tags) == 300 and info["tags_dropped"] == 100
    assert "At most 300 tags are drawn per trajectory" in obs["text"]


def test_replace_clears_and_restarts_numbering(env) -> None:
    env.reset(seed=0, options={"stimulus_id": "four"})
    env.step(tag_json([[1, 1], [2, 2], [3, 3]]))
    obs, *_ = env.step(tag_json([[500, 500]], mode="replace"))
    assert env.state.tags == [(384.0, 384.0)]
    assert obs["text"].startswith("Tags 1..1 are now drawn")


def test_tag1_discards_extra_points_with_notice(tiny_dataset) -> None:
    e = CountImageEnv(tiny_dataset, tools=("tag",), one_point_per_call=True)
    obs, _ = e.reset(seed=0, options={"stimulus_id": "four"})
    assert e.budget == 80 and tpl.ONE_POINT.format(obj_sing="dot") in obs["text"]
    obs, *_, info = e.step(tag_json([[1, 1], [2, 2], [3, 3]]))
    assert len(info["tags_added"]) == 1
    assert obs["text"].startswith("Only ONE point per tag call is allowed; 2 extra point(s) were discarded.")


def test_order_sentence_and_no_verify(tiny_dataset) -> None:
    e = CountImageEnv(tiny_dataset, order="reverse", verify=False)
    obs, _ = e.reset(seed=0, options={"stimulus_id": "four"})
    assert obs["text"] == "Count the dots in this image. " + tpl.ORDER["reverse"].format(obj="dots")
    obs, *_ = e.step(tag_json([[1, 1]]))
    assert obs["text"] == "Tags 1..1 are now drawn. Continue. Tool calls left: 5."


def test_single_call_prompts(tiny_dataset) -> None:
    e = CountImageEnv(tiny_dataset, tools=(), prompt="direct")
    obs, _ = e.reset(seed=0, options={"stimulus_id": "two"})
    assert obs["text"] == tpl.DIRECT.format(obj="dots") and obs["system"] == ""
    _, r, term, _, info = e.step("ANSWER: 2")
    assert term and r == 1.0
    e.reset(seed=0, options={"stimulus_id": "two"})
    _, _, term, trunc, info = e.step("I cannot tell.")
    assert trunc and info["end"] == "invalid"  # one call: unparseable counts as wrong


def test_perturb_remove_and_add(tiny_dataset) -> None:
    truth = [[100 / 0.768, 100 / 0.768], [300 / 0.768, 200 / 0.768], [500 / 0.768, 600 / 0.768], [700 / 0.768, 700 / 0.768]]
    e = CountImageEnv(tiny_dataset, perturb="remove")
    e.reset(seed=3, options={"stimulus_id": "four"})
    obs, *_ = e.step(tag_json(truth))
    assert len(e.state.tags) == 3 and obs["text"].startswith("Tags 1..3 are now drawn (red dot")
    pert = e.episode_record().steps[0].perturbation
    assert pert["kind"] == "remove" and 0 <= pert["index"] < 4
    e = CountImageEnv(tiny_dataset, perturb="add")
    e.reset(seed=3, options={"stimulus_id": "four"})
    e.step(tag_json(truth[:2]))
    assert len(e.state.tags) == 3
    added = e.state.tags[-1]
    assert added in [(500.0, 600.0), (700.0, 700.0)]  # on an untagged object, exactly
    e.step(tag_json([[1, 1]]))
    assert len(e.state.tags) == 4  # only after the first tag call


def test_wide_image_resized_and_crop_sizes(wide_dataset) -> None:
    e = CountImageEnv(wide_dataset, tools=ALL)
    obs, _ = e.reset(seed=0, options={"stimulus_id": "four"})
    assert obs["image"].shape == (512, 1024, 3)
    obs, *_, info = e.step('{"tool":"crop","box":[0,0,500,500]}')
    # A 512 x 256 px box: upscaling the short side to 768 would make the long side 1536, so the
    # 1024 cap on the long side wins.
    assert info["view"] == "crop" and obs["image"].shape == (512, 1024, 3)
    obs, *_ = e.step("junk")
    assert obs["image"].shape == (512, 1024, 3)
    assert crop_size(100, 100) == (768, 768)
    assert crop_size(1000, 100) == (1024, 102)
    assert crop_size(900, 800) == (900, 800)


def test_rewards(tiny_dataset) -> None:
    cases = {"exact": 0.0, "neg_abs_error": -1.0, "audit": 3.0 - 0.0 - 1.0}
    pts = [[100 / 0.768, 100 / 0.768], [300 / 0.768, 200 / 0.768], [500 / 0.768, 600 / 0.768], [50, 900]]
    for name, want in cases.items():
        e = CountImageEnv(tiny_dataset, reward=name, tool_cost=0.25)
        e.reset(seed=0, options={"stimulus_id": "four"})
        _, r1, *_ = e.step(tag_json(pts))
        _, r2, term, *_ = e.step(Answer(count=3))
        assert term and r1 == -0.25 and r2 == pytest.approx(want)
    e = CountImageEnv(tiny_dataset, reward=lambda state, stim: 10.0 * len(state.tags))
    e.reset(seed=0, options={"stimulus_id": "four"})
    e.step(tag_json(pts[:2]))
    assert e.step(Answer(count=4))[1] == 20.0


def test_failed_model_call_ends_with_error(env) -> None:
    env.reset(seed=0, options={"stimulus_id": "four"})
    _, _, term, trunc, info = env.step(Reply(text="", error="provider said no"))
    assert trunc and info["end"] == "error" and env.episode_record().error == "provider said no"
    with pytest.raises(RuntimeError):
        env.step("{}")


def test_reply_usage_is_logged(env) -> None:
    from countgym.logs import Usage

    env.reset(seed=0, options={"stimulus_id": "four"})
    env.step(Reply(text='{"tool":"answer","count":4}', usage=Usage(prompt_tokens=10, completion_tokens=3), cost=0.5, latency_s=1.5))
    step = env.episode_record().steps[0]
    assert step.reply == '{"tool":"answer","count":4}' and step.usage.prompt_tokens == 10 and step.cost == 0.5


def test_same_seed_same_rollout(tiny_dataset) -> None:
    def rollout(seed: int) -> list[str]:
        e = CountImageEnv(tiny_dataset, tools=ALL, perturb="remove")
        obs, _ = e.reset(seed=seed)
        out = [sha(obs["image"])]
        for a in [tag_json([[130, 130], [390, 260], [651, 781]]), '{"tool":"grid","on":true}', '{"tool":"crop","box":[0,0,300,300]}', '{"tool":"answer","count":3}']:
            obs, *_ = e.step(a)
            out.append(sha(obs["image"]) + obs["text"])
        return out

    assert rollout(5) == rollout(5)
    assert {rollout(s)[0] for s in range(8)} != {rollout(0)[0]}  # the seed picks the stimulus


# Golden hashes of rendered working images: any change to the renderer must be deliberate.
GOLDEN = {
    "tags": "305b030aa8450c6f",
    "tags_plain": "ed7a69a778e966af",
    "erase_grid": "2ac65f10fef7c851",
    "crop": "c215dad1b3f5c831",
}


def _golden_images() -> dict[str, np.ndarray]:
    from PIL import Image

    from countgym.envs.render import crop_view

    base = Image.new("RGB", (768, 768), "white")
    rng = np.random.default_rng(7)
    tags = [tuple(map(float, p)) for p in rng.uniform(0, 768, (40, 2)).round(2)]
    tags += [(5.0, 5.0), (763.0, 400.0), (400.0, 763.0), (12.0, 12.0)]  # edges force other offsets
    erased = [{"kind": "disc", "xy": [200.0, 200.0], "r": 15.36}, {"kind": "box", "xyxy": [300.0, 300.0, 420.0, 380.0]}]
    work = render_working_image(base, tags, erased, True)
    return {
        "tags": np.asarray(render_working_image(base, tags)),
        "tags_plain": np.asarray(render_working_image(base, tags, numbered=False)),
        "erase_grid": np.asarray(work),
        "crop": np.asarray(crop_view(work, (100.0, 100.0, 400.0, 250.0))),
    }


def test_golden_renders() -> None:
    got = {k: sha(v) for k, v in _golden_images().items()}
    assert got == GOLDEN


@pytest.mark.slow
def test_registered_envs_pass_check_env() -> None:
    import countgym.registration as reg

    for env_id in reg.IMAGE_ENVS:
        if env_id in reg.PHOTO_ENVS:
            continue  # need a downloaded release; checked with fixtures in tests/test_photos_*.py
        e = gym.make(env_id, tools=ALL)
        check_env(e.unwrapped, skip_render_check=True)
        e.close()


def _make(ds):
    return lambda: CountImageEnv(ds, tools=ALL)


def test_sync_vector_env_messages_intact(tiny_dataset) -> None:
    venv = gym.vector.SyncVectorEnv([_make(tiny_dataset)] * 2)
    obs, _ = venv.reset(seed=[1, 2])
    assert obs["text"] == ("Count the dots in this image.",) * 2
    obs, *_ = venv.step(['{"tool":"tag","points":[[1,1]]}', "junk"])
    assert obs["text"][0].startswith("Tags 1..1 are now drawn") and obs["text"][1].startswith("Your last line")
    venv.close()


def test_async_vector_env_messages_intact(tiny_dataset) -> None:
    venv = gym.vector.AsyncVectorEnv([_make(tiny_dataset)] * 2, shared_memory=False)
    obs, _ = venv.reset(seed=[1, 2])
    assert obs["system"][0].startswith("You are counting dots") and obs["text"][1] == "Count the dots in this image."
    obs, *_ = venv.step(['{"tool":"grid","on":true}', '{"tool":"tag","points":[[1,1],[2,2]]}'])
    assert obs["text"][0] == tpl.GRID_DONE.format(left=5)
    assert obs["text"][1].startswith("Tags 1..2 are now drawn (red dot = exact point, numbered box beside it).")
    assert obs["image"][0].shape == (768, 768, 3)
    venv.close()


def test_vector_env_batches_info_of_sub_envs_in_different_states(tiny_dataset) -> None:
    """One sub-env answers, one ends invalid without an answer, one is mid-episode."""
    venv = gym.vector.SyncVectorEnv([_make(tiny_dataset)] * 3)
    venv.reset(seed=[1, 2, 3])
    venv.step(['{"tool":"tag","points":[[1,1]]}', "junk", "junk"])
    venv.step(["junk", "junk", '{"tool":"tag","points":[[5,5]]}'])
    venv.step(["junk", "junk", "junk"])
    obs, rew, term, trunc, info = venv.step(['{"tool":"answer","count":1}', "junk", "junk"])
    assert list(term) == [True, False, False] and list(trunc) == [False, True, False]
    assert info["_answer"].tolist() == [True, False, False] and info["answer"][0] == 1
    assert info["_end"].tolist() == [True, True, False] and list(info["end"][:2]) == ["answer", "invalid"]
    assert info["episode_record"][1].end == "invalid" and info["episode_record"][1].answer is None
    venv.close()


def test_label_boxes_placed_after_earlier_tags_equal_a_fresh_placement() -> None:
    """A re-render places only the tags after those of the thread's last call (a box depends on
    the tags before it): the boxes must equal a placement from scratch, whatever came before
    (a longer list, a shorter one, another image size, a list that is no extension)."""
    import threading

    from countgym.envs import render

    rng = np.random.default_rng(11)
    tags = [(float(x), float(y)) for x, y in rng.uniform(0, 768, size=(60, 2))]

    def fresh(points: list[tuple[float, float]], size: tuple[int, int]) -> np.ndarray:
        out: list[np.ndarray] = []
        t = threading.Thread(target=lambda: out.append(render.label_boxes(points, size)))
        t.start()
        t.join()
        return out[0]

    calls = [(tags[:10], (768, 768)), (tags[:25], (768, 768)), (tags[:25], (768, 768)), (tags, (768, 768)),
             (tags[:5], (768, 768)), (tags[:30], (640, 768)), (tags[1:30], (640, 768)), ([], (640, 768)),
             (tags[:40], (640, 768))]
    for points, size in calls:
        got = render.label_boxes(points, size)
        assert np.array_equal(got, fresh(points, size)), (len(points), size)
        got[:] = -1  # the caller's array: mutating it must not change later placements
    # the order matters: the same tags reversed are placed afresh
    assert np.array_equal(render.label_boxes(tags[::-1], (768, 768)), fresh(tags[::-1], (768, 768)))
