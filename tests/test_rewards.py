"""The RL rewards on hand-built episodes with known values: ``exact``, ``neg_abs_error``, ``audit``
(the audit's matcher: on-target minus duplicates and phantoms), the per-tool-call cost, custom
callables, and rewards computed in the working-image frame of a resized stimulus."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from countgym.envs.actions import Answer, Tag
from countgym.envs.image_env import CountImageEnv
from countgym.envs.rewards import audit, exact, neg_abs_error, resolve_reward
from countgym.envs.state import EpisodeState
from countgym.envs.wrappers import EpisodeStats
from countgym.stimulus import Stimulus

FOUR = [(100.0, 100.0), (300.0, 200.0), (500.0, 600.0), (700.0, 700.0)]


def _state(answer: int | None, tags: list[tuple[float, float]] = ()) -> EpisodeState:
    st = EpisodeState(original=Image.new("RGB", (768, 768)), calls_left=0, tags=list(tags))
    st.answer = answer
    return st


def _stim(points: list[tuple[float, float]] | None = FOUR, n: int = 4) -> Stimulus:
    return Stimulus(id="s", n=n, obj="dots", obj_sing="dot", image="x.png", points=points)


@pytest.mark.parametrize(
    ("answer", "want_exact", "want_neg"),
    [(4, 1.0, 0.0), (6, 0.0, -2.0), (1, 0.0, -3.0), (0, 0.0, -4.0), (None, 0.0, -4.0)],
)
def test_exact_and_neg_abs_error_known_values(answer: int | None, want_exact: float, want_neg: float) -> None:
    assert exact(_state(answer), _stim()) == want_exact
    assert neg_abs_error(_state(answer), _stim()) == want_neg


def test_audit_reward_counts_on_target_minus_duplicates_and_phantoms() -> None:
    # Nearest-neighbour distances are all sqrt(200^2 + 100^2) = 223.6 px, so tau = 111.8 px.
    tags = [
        (102.0, 99.0),  # on target: object 0
        (105.0, 104.0),  # duplicate: within tau of object 0, which is taken
        (301.0, 198.0),  # on target: object 1
        (900.0, 100.0),  # phantom: 608 px from the nearest object
    ]
    assert audit(_state(3, tags), _stim()) == 2 - 1 - 1
    assert audit(_state(4, FOUR), _stim()) == 4.0
    assert audit(_state(0, []), _stim()) == 0.0
    assert audit(_state(2, [(900.0, 900.0), (20.0, 700.0)]), _stim()) == -2.0
    # No point ground truth (count-only datasets): the shaped reward is 0, never an error.
    assert audit(_state(4, FOUR), _stim(points=None)) == 0.0


def test_resolve_reward_names_and_callables() -> None:
    assert resolve_reward("exact") is exact and resolve_reward("audit") is audit
    fn = lambda state, stimulus: 7.0  # noqa: E731
    assert resolve_reward(fn) is fn
    with pytest.raises(ValueError, match="unknown reward 'bogus'"):
        resolve_reward("bogus")


def _norm(points: list[tuple[float, float]], size: tuple[int, int]) -> list[tuple[float, float]]:
    w, h = size
    return [(x * 1000 / w, y * 1000 / h) for x, y in points]


def _episode(env: CountImageEnv, sid: str, actions: list) -> list[float]:
    env.reset(seed=0, options={"stimulus_id": sid})
    rewards = []
    for a in actions:
        _, r, term, trunc, _ = env.step(a)
        rewards.append(r)
        if term or trunc:
            break
    return rewards


def test_tool_call_cost_per_step_and_episode_reward_at_the_end(tiny_dataset) -> None:
    env = CountImageEnv(tiny_dataset, tools=("tag", "grid"), reward="exact", tool_cost=0.25)
    pts = _norm(FOUR, (768, 768))
    r = _episode(env, "four", [Tag(points=pts[:2]), Tag(points=pts[2:]), '{"tool":"grid","on":true}', Answer(count=4)])
    assert r == [-0.25, -0.25, -0.25, 1.0]
    # An invalid reply and the answer spend no call: no cost.
    r = _episode(env, "four", ["no json here", Answer(count=3)])
    assert r == [0.0, 0.0]


def test_audit_reward_through_the_env_with_cost(tiny_dataset) -> None:
    env = EpisodeStats(CountImageEnv(tiny_dataset, reward="audit", tool_cost=0.1))
    pts = _norm(FOUR, (768, 768))
    dup = (pts[0][0] + 3, pts[0][1] + 3)  # ~2.3 px from object 0 on the 768-px image
    phantom = (950.0, 50.0)
    r = _episode(env, "four", [Tag(points=[*pts[:3], dup]), Tag(points=[phantom]), Answer(count=5)])
    assert r[:2] == [-0.1, -0.1]
    assert r[2] == pytest.approx(3 - 1 - 1)
    assert env.return_queue[-1] == pytest.approx(1 - 0.2)
    assert env.tool_call_queue[-1] == 2 and env.tag_queue[-1] == 5


def test_budget_end_and_invalid_end_rewards(tiny_dataset) -> None:
    env = CountImageEnv(tiny_dataset, budget=1, reward="neg_abs_error", tool_cost=0.5)
    pts = _norm(FOUR, (768, 768))
    # Budget spent, the final request not answered: the announced count is the 3 tags.
    assert _episode(env, "four", [Tag(points=pts[:3]), "I am not sure"]) == [-0.5, -1.0]
    # Three re-issued unparseable replies, then a fourth ends it: no count, scored as minus the true count.
    env = CountImageEnv(tiny_dataset, reward="neg_abs_error")
    assert _episode(env, "four", ["w", "x", "y", "z"]) == [0.0, 0.0, 0.0, -4.0]
    env = CountImageEnv(tiny_dataset, reward="exact")
    assert _episode(env, "two", ["x", "y", "z"]) == [0.0, 0.0, 0.0]


def test_custom_reward_sees_state_and_truth_in_the_working_frame(wide_dataset) -> None:
    # The wide stimulus is stored at 2048 x 1024 and shown at 1024 x 512: tags land in the working
    # frame, and the stimulus handed to the reward has its points in that frame too.
    seen = {}

    def reward(state, stimulus) -> float:
        seen["tags"], seen["points"] = list(state.tags), list(stimulus.points)
        return 10.0 * len(state.tags) + (state.answer or 0)

    env = CountImageEnv(wide_dataset, reward=reward)
    stored = [(100.0, 100.0), (300.0, 200.0), (500.0, 600.0), (700.0, 700.0)]
    r = _episode(env, "four", [Tag(points=_norm(stored, (2048, 1024))), Answer(count=4)])
    assert r == [0.0, 44.0]
    want = np.array(stored) / 2
    assert np.allclose(seen["points"], want)
    assert np.allclose(seen["tags"], want, atol=0.6)  # through the normalised frame
    env = CountImageEnv(wide_dataset, reward="audit")
    assert _episode(env, "four", [Tag(points=_norm(stored, (2048, 1024))), Answer(count=4)])[-1] == 4.0
