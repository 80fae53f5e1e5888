"""The TRL adapter with the real TRL on CPU: the tool-loop environment, the reward path, GRPO steps
on the tiny random SmolVLM (weights must move), and log-probs that agree with GRPOTrainer's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("trl")
pytest.importorskip("datasets")

import torch  # noqa: E402

from countgym.agents.backends.base import image_part, message, text_part  # noqa: E402
from countgym.agents.backends.tiny import build_tiny_smolvlm  # noqa: E402
from countgym.envs.image_env import CountImageEnv  # noqa: E402
from countgym.integrations import trl as ctrl  # noqa: E402
from countgym.rollout import LogProbModel  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_smolvlm(tmp_path_factory.mktemp("tiny-smolvlm")))


# --- the tool loop environment -----------------------------------------------------------------------
def test_tool_env_exposes_enabled_tools_and_scores_the_episode(tiny_dataset) -> None:
    env = ctrl.environment_factory(tiny_dataset, tools=("tag",), reward="exact")()
    assert hasattr(env, "tag") and hasattr(env, "answer") and not hasattr(env, "crop")
    first = env.reset(stimulus_id="two", extra_column="ignored")
    assert first[0]["type"] == "image" and "dots" in first[1]["text"]
    start = np.asarray(first[0]["image"])
    out = env.tag(points=[[65, 78], [521, 521]])  # the two discs, normalised frame
    assert isinstance(out, list) and out[0]["type"] == "image"
    assert (np.asarray(out[0]["image"]) != start).any()  # the tags are drawn
    last = env.answer(count=2)
    assert last[0]["type"] == "image" and last[1]["text"] == "Done."  # the last result has an image too
    assert env.get_reward() == 1.0
    rec = env.records[-1]
    assert rec.stimulus_id == "two" and rec.answer == 2 and len(rec.tags) == 2 and rec.end == "answer"
    assert rec.arm.name == "trl-tools"


def test_tool_env_unanswered_episode_is_scored_as_no_answer(tiny_dataset) -> None:
    env = ctrl.environment_factory(tiny_dataset, tools=("tag", "crop"), reward="neg_abs_error")()
    assert hasattr(env, "crop")
    env.reset(stimulus_id="four")
    assert env.get_reward() == -4.0  # no count announced: -n
    assert env.records[-1].answer is None
    with pytest.raises(ValueError):  # TRL turns a raising tool into an error message to the model
        env.reset(stimulus_id="four")
        env.tag(points=[["a", 1]])
    for bad in ([1, 2, 3], [float("nan"), 0, 10, 10], ["x", 0, 1, 1]):
        with pytest.raises(ValueError):
            env.crop(box=bad)
    assert isinstance(env.tag(points=[[100, 100]]), list)  # the episode goes on
    assert isinstance(env.crop(box=[0, 0, 500, 500]), list)


def test_tool_template_renders_and_trl_parses_tool_calls(tiny_model) -> None:
    from transformers import AutoProcessor
    from trl.chat_template_utils import (
        is_chat_template_prefix_preserving,
        parse_response,
        supports_tool_calling,
    )

    proc = AutoProcessor.from_pretrained(tiny_model)
    assert not supports_tool_calling(proc)  # SmolVLM's own template: TRL refuses the tool loop
    ctrl.use_tool_chat_template(proc)
    assert supports_tool_calling(proc) and is_chat_template_prefix_preserving(proc)
    tok = proc.tokenizer
    prompt = tok("Assistant:", add_special_tokens=False)["input_ids"]
    reply = tok('<tool_call>{"name": "tag", "arguments": {"points": [[1, 2]]}}</tool_call><end_of_utterance>',
                add_special_tokens=False)["input_ids"]
    parsed = parse_response(tok, reply, prefix=prompt)
    assert parsed["tool_calls"][0]["function"] == {"name": "tag", "arguments": {"points": [[1, 2]]}}


def test_grpo_tool_loop_calls_our_tools_and_scores_with_the_env(tiny_model, tiny_dataset, tmp_path) -> None:
    """TRL's own tool loop, with the model's turns scripted (a random model never calls a tool):
    TRL parses the calls, runs the env's tools, feeds back the tool images, and the advantages
    come from the env's reward."""
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl import GRPOConfig, GRPOTrainer

    proc = ctrl.use_tool_chat_template(AutoProcessor.from_pretrained(tiny_model, padding_side="left"))
    made: list[ctrl.CountingToolEnv] = []
    factory = ctrl.environment_factory(tiny_dataset, tools=("tag",), budget=3, reward="exact")

    def make() -> ctrl.CountingToolEnv:
        made.append(factory())
        return made[-1]

    trainer = GRPOTrainer(
        model=AutoModelForImageTextToText.from_pretrained(tiny_model, dtype=torch.float32),
        args=GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
                        max_completion_length=400, report_to="none", use_cpu=True),
        processing_class=proc,
        train_dataset=ctrl.tool_dataset(tiny_dataset, ["two", "four"]),
        environment_factory=make,
    )
    turns = [
        '<tool_call>{"name": "tag", "arguments": {"points": [[65, 78], [521, 521]]}}</tool_call><end_of_utterance>',
        '<tool_call>{"name": "answer", "arguments": {"count": 2}}</tool_call><end_of_utterance>',
        "Done.<end_of_utterance>",
    ]
    calls: list[bool] = []

    def scripted_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        calls.append(has_tool_images)
        ids = proc.tokenizer(turns[min(len(calls) - 1, 2)], add_special_tokens=False)["input_ids"]
        return [list(ids) for _ in prompt_ids], None

    trainer._generate_single_turn = scripted_turn  # the model's turns only; the rest is TRL's
    out = trainer._generate_and_score_completions([dict(r) for r in ctrl.tool_dataset(tiny_dataset, ["two", "four"])])
    assert calls == [False, True, True]  # the tag result carried the working image back
    recs = {r.stimulus_id: r for e in made for r in e.records}
    assert {k: (r.answer, len(r.tags), r.end) for k, r in recs.items()} == {"two": (2, 2, "answer"), "four": (2, 2, "answer")}
    # Rewards 1 (two) and 0 (four): GRPO's group-normalised advantages have opposite signs.
    adv = out["advantages"].tolist()
    assert adv[0] > 0 > adv[1]


# --- the single-step reward path -------------------------------------------------------------------
def test_prompt_dataset_carries_the_stimulus_in_the_row_and_env_reward_scores(tiny_dataset) -> None:
    env = CountImageEnv(tiny_dataset, prompt="direct", tools=(), budget=0)
    rows = ctrl.prompt_dataset(env, ["four", "two"], repeats=2)
    assert rows["stimulus_id"] == ["four", "four", "two", "two"]
    assert "four" not in str(rows[0]["prompt"])  # not smuggled in the prompt
    assert len(rows[0]["images"]) == 1
    reward = ctrl.env_reward(lambda: CountImageEnv(tiny_dataset, prompt="direct", tools=(), budget=0))
    got = reward(
        completions=[[{"role": "assistant", "content": "ANSWER: 4"}], "ANSWER: 3", "I see two.\nANSWER: 2", "<|junk"],
        stimulus_id=rows["stimulus_id"],
    )
    assert got == [1.0, 0.0, 1.0, 0.0]


# --- GRPO steps, weights moving ---------------------------------------------------------------------
@pytest.mark.parametrize("route", ["tools", "single", "rollout"])
def test_grpo_example_runs_two_steps_and_moves_the_weights(route, tmp_path, capsys) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import grpo_tiny
    finally:
        sys.path.remove(str(EXAMPLES))
    assert grpo_tiny.main(["--route", route, "--steps", "2", "--workdir", str(tmp_path)]) == 0
    import json

    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["steps"] == 2 and out["max_weight_change"] > 0 and len(out["rewards"]) == 2


# --- log-probs agree with the trainer's ------------------------------------------------------------
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recorded_logprobs_match_grpo_trainer(tiny_model, tiny_dataset, tmp_path, temperature) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl import GRPOConfig, GRPOTrainer

    env = CountImageEnv(tiny_dataset, prompt="direct", tools=(), budget=0)
    trainer = GRPOTrainer(
        model=AutoModelForImageTextToText.from_pretrained(tiny_model, dtype=torch.float32),
        args=GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
                        max_completion_length=8, report_to="none", use_cpu=True, temperature=temperature),
        processing_class=AutoProcessor.from_pretrained(tiny_model, padding_side="left"),
        train_dataset=ctrl.prompt_dataset(env),
        reward_funcs=ctrl.env_reward(lambda: env),
    )
    prompts = []
    for sid in ("four", "two"):
        obs, _ = env.reset(options={"stimulus_id": sid})
        prompts.append([message("user", image_part(obs["image"]), text_part(obs["text"]))])

    def gap(model: LogProbModel) -> float:
        torch.manual_seed(0)
        gens = model.complete_batch(prompts)
        inputs = model._prompt_inputs(prompts)
        width = max(len(g.token_ids) for g in gens)
        comp = torch.full((2, width), model.pad_id, dtype=torch.long)
        cmask = torch.zeros_like(comp)
        for b, g in enumerate(gens):
            comp[b, : len(g.token_ids)] = torch.tensor(g.token_ids)
            cmask[b, : len(g.token_ids)] = 1
        with torch.no_grad():
            theirs, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, torch.cat([inputs["input_ids"], comp], 1),
                torch.cat([inputs["attention_mask"], cmask], 1), width,
                pixel_values=inputs["pixel_values"], pixel_attention_mask=inputs.get("pixel_attention_mask"),
                num_images=[1, 1],
            )
        return max(
            float((torch.tensor(g.logprobs) - theirs[b, : len(g.token_ids)]).abs().max()) for b, g in enumerate(gens)
        )

    opts = {"device": "cpu", "max_new_tokens": 8, "temperature": temperature}
    agree, default = gap(ctrl.trainer_logprob_model(tiny_model, **opts)), gap(LogProbModel(tiny_model, **opts))
    print(f"T={temperature}: max |countgym - GRPOTrainer| per token: trainer_logprobs {agree:.2e}, default {default:.3f}")
    assert agree < 2e-3
    # The sampling-distribution log-probs (control tokens renormalised away) differ by ~0.1 nats.
    assert default > 0.05


def test_single_step_video_rows_carry_every_frame_and_score_with_the_env(tmp_path) -> None:
    from countgym.envs.video_env import CountVideoEnv
    from countgym.scenes.video import make_countvideo
    from countgym.stimulus import Dataset

    ds = Dataset(make_countvideo(tmp_path / "cv", limit=2, size=(48, 27), progress=False, workers=1))
    rows = ctrl.prompt_dataset(CountVideoEnv(ds))
    sid = rows[0]["stimulus_id"]
    assert len(rows[0]["images"]) == len(ds[sid].frames) > 2
    assert sum(p["type"] == "image" for p in rows[0]["prompt"][0]["content"]) == len(rows[0]["images"])
    n = ds[sid].n
    reward = ctrl.env_reward(lambda: CountVideoEnv(ds, reward="exact"))
    assert reward(completions=[f"There are {n}.", f"There are {n + 1}."], stimulus_id=[sid, sid]) == [1.0, 0.0]
