"""GRPO with TRL on a tiny local VLM, end to end on CPU: countgym environments as the reward.

    python examples/grpo_tiny.py                     # tool loop: environment_factory, 2 steps
    python examples/grpo_tiny.py --route single      # single-turn `direct` arm: TRL generates, env scores
    python examples/grpo_tiny.py --route rollout     # the same, countgym's LogProbModel generates
    python examples/grpo_tiny.py --model /path/to/SmolVLM-256M-Instruct --steps 50

``--route tools`` trains the multi-turn tool loop of *Give the Model a Finger* (Section 3) through
``GRPOTrainer(environment_factory=...)``: each rollout owns a ``CountImageEnv`` whose tools (tag,
answer) are function tools; tool results carry the re-rendered image. ``--route single`` trains
the single-call ``direct`` arm: rows carry the image and the ``stimulus_id``, the reward function
steps the environment with each completion; ``--route rollout`` samples those replies with
countgym's ``rollout_func`` (trainer-consistent log-probs) instead of TRL's generation.
The tiny random model (built here, no download) never calls a tool or announces a count: these
routes show the wiring works and the weights move (a small brevity bonus gives it a signal).
``examples/grpo_tools.py`` is the recipe in which the model calls tools and learns. Prints one JSON line
at the end: steps run, the largest weight change, rewards seen. Needs the ``trl`` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def make_dataset(root: Path) -> Any:
    """Four small images with 1-4 black discs (exact centres), as a dataset folder."""
    from PIL import Image, ImageDraw

    from countgym.stimulus import Dataset, Stimulus, write_manifest

    (root / "images").mkdir(parents=True, exist_ok=True)
    stims = []
    for n in (1, 2, 3, 4):
        pts = [(16.0 + 20 * i, 40.0) for i in range(n)]
        im = Image.new("RGB", (96, 96), "white")
        d = ImageDraw.Draw(im)
        for x, y in pts:
            d.ellipse([x - 6, y - 6, x + 6, y + 6], fill="black")
        im.save(root / f"images/n{n}.png")
        stims.append(Stimulus(id=f"n{n}", n=n, obj="dots", obj_sing="dot", image=f"images/n{n}.png", points=pts))
    write_manifest(root, stims)
    return Dataset(root)


def brevity_bonus(completions: list[Any], **_: Any) -> list[float]:
    """Shaping for the tiny random model, which never announces a count: a small bonus for
    shorter replies in characters (the protocol asks for one line), so the replies of a group
    score differently and the weights move."""
    from countgym.integrations.trl import completion_text

    return [0.1 / (1 + len(completion_text(c))) for c in completions]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--route", choices=("tools", "single", "rollout"), default="tools")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--max-completion-length", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--model", default=None, help="a local model folder (default: build the tiny one)")
    ap.add_argument("--workdir", default=None, help="where the tiny model, data and trainer output go")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.max_completion_length < 1:
        print("error: --steps and --max-completion-length must be >= 1", file=sys.stderr)
        return 2
    try:
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        print("error: this example needs the 'trl' extra: pip install 'countgym[trl]'", file=sys.stderr)
        return 2

    from countgym.envs.image_env import CountImageEnv
    from countgym.integrations import trl as ctrl

    work = Path(args.workdir or tempfile.mkdtemp(prefix="countgym-grpo-"))
    ds = make_dataset(work / "data")
    built = args.model is None
    if built:
        from countgym.agents.backends.tiny import build_tiny_smolvlm

        args.model = str(build_tiny_smolvlm(work / "tiny-smolvlm"))
    if built:
        torch.set_num_threads(1)  # the tiny model: a second thread only adds waiting on a busy machine
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(args.model, padding_side="left")
    before = {k: v.detach().clone() for k, v in model.named_parameters()}

    config = GRPOConfig(
        output_dir=str(work / "trainer"),
        max_steps=args.steps,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=args.max_completion_length,
        learning_rate=args.lr,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        beta=0.0,
    )
    if args.route == "tools":
        use = ctrl.use_tool_chat_template(processor)
        trainer = GRPOTrainer(
            model=ctrl.use_tool_images(model),
            args=config,
            processing_class=use,
            train_dataset=ctrl.tool_dataset(ds),
            reward_funcs=[brevity_bonus],
            environment_factory=ctrl.environment_factory(ds, tools=("tag",), budget=2, reward="neg_abs_error"),
        )
    else:
        def direct_env() -> CountImageEnv:
            return CountImageEnv(ds, prompt="direct", tools=(), budget=0, reward="neg_abs_error")

        sampler = None
        if args.route == "rollout":
            sampler = ctrl.rollout_func(args.model, max_new_tokens=args.max_completion_length, device="cpu")
        trainer = GRPOTrainer(
            model=model,
            args=config,
            processing_class=processor,
            train_dataset=ctrl.prompt_dataset(direct_env()),
            reward_funcs=[ctrl.env_reward(direct_env), brevity_bonus],
            rollout_func=sampler,
        )
    trainer.train()
    moved = max((p.detach() - before[k]).abs().max().item() for k, p in model.named_parameters())
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    calls = [h["tools/call_frequency"] for h in trainer.state.log_history if "tools/call_frequency" in h]
    print(json.dumps({"route": args.route, "steps": trainer.state.global_step, "max_weight_change": moved,
                      "rewards": rewards, "tool_call_frequency": calls}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
