"""GRPO through TRL on countgym's image tool loop, on CPU, that calls tools and learns.

    python examples/grpo_tools.py                    # the recipe at its defaults
    python examples/grpo_tools.py --out runs/grpo    # keep the log, the plot and the data there

The task is *Give the Model a Finger*'s tool loop (Section 3) with the ``tag`` and ``answer``
tools, on small counts so a tiny model can learn it on CPU: white 96-px images with 1 to 3 black
discs at random places (seeded), a training set and a held-out set. The model is countgym's tiny
random SmolVLM (built here, no download).

1. **Warm-up on demonstrations.** The ``oracle`` policy runs each training stimulus through the
   environment (tag every disc, then answer). Each of its turns becomes one SFT row for TRL's
   ``SFTTrainer``: the conversation so far (images included, the tool results being the
   environment's re-rendered images) and the oracle's tool call as native function-call text.
   It teaches the call format and a first guess at the counts.
2. **GRPO.** ``GRPOTrainer(environment_factory=...)`` runs the tool loop: the model's ``tag``
   calls run in ``CountImageEnv``, the re-rendered working image goes back to the model, and the
   environment's ``neg_abs_error`` reward (``-|answer - n|``) scores each episode. Completions are
   sampled at temperature 1, several per stimulus, so a group's rewards differ.
3. **Held-out check.** TRL's own evaluation runs the same loop on held-out stimuli before the
   warm-up, after it, and after GRPO.

Writes ``log.jsonl`` (TRL's metrics per step and the evaluations), ``curve.png`` (the learning
curve) and ``summary.json`` under ``--out``, and prints the summary as the last stdout line.
Needs the ``trl`` extra and matplotlib.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

SIZE = 96
"""Image side in pixels."""
RADIUS = 9
"""Disc radius in pixels: at the tiny model's 32-px input a disc is still 6 px across."""
COUNTS = (1, 2, 3)
"""The cardinalities, in turn over the stimuli of each split."""
ENV_OPTIONS: dict[str, Any] = {"tools": ("tag",), "budget": 2, "reward": "neg_abs_error"}
"""The environment of the demonstrations and of GRPO: ``tag`` and ``answer``, two tool calls,
reward ``-|answer - n|`` (``-n`` with no answer): a group's replies score apart even when none
is exact, and a reply that drops the tool format scores worst."""
DEFAULTS: dict[str, Any] = {
    "warmup_steps": 150, "warmup_lr": 2e-2, "steps": 60, "num_generations": 8, "prompts_per_step": 2,
    "lr": 1e-3, "train": 24, "heldout": 12, "seed": 0,
}  # fmt: skip
"""The recipe's defaults (docs/scale-and-rl.md quotes them with the measured run)."""


def make_dataset(root: Path, counts: tuple[int, ...], n_train: int, n_heldout: int, seed: int) -> Any:
    """Images of 1-3 black discs at random, non-overlapping places: ``train-*`` and ``heldout-*``."""
    from PIL import Image, ImageDraw

    from countgym.stimulus import Dataset, Stimulus, write_manifest

    rng = random.Random(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    stims = []
    for split, k in (("train", n_train), ("heldout", n_heldout)):
        for i in range(k):
            n = counts[i % len(counts)]
            pts: list[tuple[float, float]] = []
            while len(pts) < n:
                x, y = rng.uniform(RADIUS + 2, SIZE - RADIUS - 2), rng.uniform(RADIUS + 2, SIZE - RADIUS - 2)
                if all((x - a) ** 2 + (y - b) ** 2 > (2 * RADIUS + 6) ** 2 for a, b in pts):
                    pts.append((round(x, 1), round(y, 1)))
            im = Image.new("RGB", (SIZE, SIZE), "white")
            d = ImageDraw.Draw(im)
            for x, y in pts:
                d.ellipse([x - RADIUS, y - RADIUS, x + RADIUS, y + RADIUS], fill="black")
            sid = f"{split}-{i:03d}"
            im.save(root / f"images/{sid}.png")
            stims.append(Stimulus(id=sid, n=n, obj="dots", obj_sing="dot", image=f"images/{sid}.png", points=pts))
    write_manifest(root, stims)
    return Dataset(root)


def oracle_rows(ds: Any, ids: list[str], env_options: dict[str, Any], processor: Any) -> list[dict[str, Any]]:
    """SFT rows from the ``oracle`` policy's own episodes: one row per model turn. The prompt is
    the conversation so far rendered by the tool chat template (the environment's images and
    messages, as TRL's tool loop builds it), the completion the oracle's action as a native tool
    call, and after ``answer`` an empty turn that ends the reply."""
    from PIL import Image

    from countgym.agents.scripted import Oracle
    from countgym.envs.actions import Answer, Tag
    from countgym.envs.image_env import CountImageEnv
    from countgym.task import Task

    def render(messages: list[dict[str, Any]], prompt: bool) -> str:
        return str(processor.apply_chat_template(messages, add_generation_prompt=prompt, tokenize=False))

    rows = []
    env = CountImageEnv(ds, **env_options)
    for sid in ids:
        obs, _ = env.reset(options={"stimulus_id": sid})
        stim = env.stimulus
        sw, sh = env._episode["stored_size"]
        policy = Oracle()
        policy.give_truth([(x * 1000.0 / sw, y * 1000.0 / sh) for x, y in stim.points or []], stim.n)
        w, h = env.state.original.size
        policy.reset(obs, Task(obj=stim.obj, obj_sing=stim.obj_sing, image_size=(w, h), tools=env.tools,
                               budget=env.budget, options=env.options()))
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": obs["text"]}]}
        ]
        images = [Image.fromarray(obs["image"])]
        for _ in range(env.budget + 2):
            action = policy.act(obs)
            if isinstance(action, Tag):
                call = {"name": "tag", "arguments": {"points": [[round(x), round(y)] for x, y in action.points]}}
            else:
                assert isinstance(action, Answer)
                call = {"name": "answer", "arguments": {"count": action.count}}
            turn = {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": call}]}
            prompt = render(messages, True)
            full = render([*messages, turn], False)
            assert full.startswith(prompt)
            rows.append({"prompt": prompt, "completion": full[len(prompt):].rstrip("\n"), "images": list(images)})
            obs, _, terminated, truncated, _ = env.step({"tool": call["name"], **call["arguments"]})
            done = terminated or truncated
            content = [{"type": "image"}, {"type": "text", "text": obs["text"] or ("Done." if done else "")}]
            images.append(Image.fromarray(obs["image"]))
            messages += [turn, {"role": "tool", "name": call["name"], "content": content}]
            if done:
                rows.append({"prompt": render(messages, True), "completion": "<end_of_utterance>", "images": list(images)})
                break
    return rows


class ImageCounter:
    """Counts the images TRL hands the image processor as one flat list: TRL does that only for
    batches that hold tool-result images, so these are the re-rendered images reaching the model."""

    def __init__(self, inner: Any) -> None:
        self.__dict__.update(_inner=inner, calls=0, images=0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_inner"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("calls", "images"):
            self.__dict__[name] = value
        else:
            setattr(self.__dict__["_inner"], name, value)

    def __call__(self, images: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(images, list) and images and not isinstance(images[0], list):
            self.calls += 1
            self.images += len(images)
        return self.__dict__["_inner"](images, *args, **kwargs)


def plot_curve(path: Path, steps: list[int], env_reward: list[float], evals: dict[str, float], window: int) -> None:
    """The learning curve: the environment's mean reward per GRPO step, its running mean, and the
    held-out evaluations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(steps, env_reward, ".", alpha=0.4, label="training batch")
    run = [sum(env_reward[max(0, i - window + 1): i + 1]) / len(env_reward[max(0, i - window + 1): i + 1])
           for i in range(len(env_reward))]
    ax.plot(steps, run, "-", label=f"running mean ({window} steps)")
    for (name, value), style in zip(evals.items(), (":", "--", "-."), strict=False):
        ax.axhline(value, linestyle=style, color="grey", label=f"held-out, {name}: {value:.2f}")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean environment reward (-|answer - n|)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder for log.jsonl, curve.png, summary.json (default: a temp folder)")
    ap.add_argument("--warmup-steps", type=int, default=DEFAULTS["warmup_steps"], help="SFT steps on the oracle's demonstrations")
    ap.add_argument("--steps", type=int, default=DEFAULTS["steps"], help="GRPO steps")
    ap.add_argument("--num-generations", type=int, default=DEFAULTS["num_generations"], help="completions per stimulus (a GRPO group)")
    ap.add_argument("--prompts-per-step", type=int, default=DEFAULTS["prompts_per_step"], help="stimuli per GRPO step")
    ap.add_argument("--warmup-lr", type=float, default=DEFAULTS["warmup_lr"], help="SFT learning rate")
    ap.add_argument("--lr", type=float, default=DEFAULTS["lr"], help="GRPO learning rate")
    ap.add_argument("--train", type=int, default=DEFAULTS["train"], help="training stimuli")
    ap.add_argument("--heldout", type=int, default=DEFAULTS["heldout"], help="held-out stimuli")
    ap.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    args = ap.parse_args(argv)
    if min(args.steps, args.num_generations - 1, args.prompts_per_step, args.train, args.heldout) < 1 or args.warmup_steps < 0:
        print("error: --steps, --prompts-per-step, --train, --heldout must be >= 1, --num-generations >= 2", file=sys.stderr)
        return 2
    try:
        import torch
        from datasets import Dataset as HFDataset
        from transformers import AutoModelForImageTextToText, AutoProcessor
        from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer
    except ImportError:
        print("error: this example needs the 'trl' extra: pip install 'countgym[trl]'", file=sys.stderr)
        return 2

    from countgym.agents.backends.tiny import build_tiny_smolvlm
    from countgym.integrations import trl as ctrl

    torch.set_num_threads(1)  # a tiny model: a second thread only adds waiting (27x slower on a busy machine)
    t0, c0 = time.time(), time.process_time()

    def log(msg: str) -> None:
        print(f"[{time.time() - t0:6.0f} s wall, {time.process_time() - c0:6.0f} s CPU] {msg}", file=sys.stderr)

    out = Path(args.out or tempfile.mkdtemp(prefix="countgym-grpo-"))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"error: cannot use --out {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    ds = make_dataset(out / "data", COUNTS, args.train, args.heldout, args.seed)
    train_ids = [i for i in ds.ids() if i.startswith("train-")]
    heldout_ids = [i for i in ds.ids() if i.startswith("heldout-")]
    env_options = dict(ENV_OPTIONS)

    model_dir = build_tiny_smolvlm(out / "tiny-smolvlm")
    torch.manual_seed(args.seed)
    model = ctrl.use_tool_images(AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32))
    processor = ctrl.use_tool_chat_template(AutoProcessor.from_pretrained(model_dir, padding_side="left"))
    counter = ImageCounter(processor.image_processor)
    processor.image_processor = counter

    g = args.num_generations
    config = GRPOConfig(
        output_dir=str(out / "grpo"), max_steps=args.steps, learning_rate=args.lr, seed=args.seed,
        per_device_train_batch_size=g * args.prompts_per_step, num_generations=g, temperature=1.0,
        per_device_eval_batch_size=8, num_generations_eval=2,
        max_completion_length=400, max_tool_calling_iterations=3, beta=0.0,
        logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model, args=config, processing_class=processor,
        train_dataset=ctrl.tool_dataset(ds, train_ids),
        eval_dataset=ctrl.tool_dataset(ds, heldout_ids),
        environment_factory=ctrl.environment_factory(ds, **env_options),
    )  # fmt: skip
    env_key = "eval_rewards/CountImageToolEnv/mean"  # TRL names the env's reward after its class

    def heldout() -> dict[str, float]:
        m = trainer.evaluate()
        return {"reward": float(m.get(env_key, float("nan"))), "tool_calls": float(m.get("eval_tools/call_frequency", 0.0))}

    evals = {"untrained": heldout()}
    log(f"held-out, untrained: {evals['untrained']}")

    rows = oracle_rows(ds, train_ids, env_options, processor)
    log(f"{len(rows)} demonstration rows; e.g. {rows[1]['prompt'][-120:]!r} -> {rows[1]['completion']!r}")
    sft = SFTConfig(output_dir=str(out / "sft"), max_steps=args.warmup_steps, per_device_train_batch_size=8,
                    learning_rate=args.warmup_lr, logging_steps=5, save_strategy="no", report_to="none", use_cpu=True,
                    seed=args.seed, disable_tqdm=True)
    if args.warmup_steps:
        SFTTrainer(model=model, args=sft, train_dataset=HFDataset.from_list(rows), processing_class=processor).train()
    evals["warm-up"] = heldout()
    log(f"held-out, after the warm-up: {evals['warm-up']}")

    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    counter.calls = counter.images = 0
    trainer.train()
    evals["GRPO"] = heldout()
    moved = max((p.detach() - before[k]).abs().max().item() for k, p in model.named_parameters())

    hist = [h for h in trainer.state.log_history if "tools/call_frequency" in h]
    key = "rewards/CountImageToolEnv/mean"
    steps = [int(h["step"]) for h in hist]
    env_reward = [float(h[key]) for h in hist]
    window = max(1, len(hist) // 4)
    with open(out / "log.jsonl", "w") as f:
        for h in trainer.state.log_history:
            f.write(json.dumps(h) + "\n")
        f.write(json.dumps({"heldout": evals}) + "\n")
    plot_curve(out / "curve.png", steps, env_reward, {k: v["reward"] for k, v in evals.items()}, window)
    summary = {
        "steps": trainer.state.global_step,
        "tool_call_frequency": [h["tools/call_frequency"] for h in hist],
        "loss": [h.get("loss", 0.0) for h in hist],
        "env_reward": env_reward,
        "first_mean": sum(env_reward[:window]) / window,
        "last_mean": sum(env_reward[-window:]) / window,
        "heldout": evals,
        "tool_images_to_model": counter.images,
        "max_weight_change": moved,
        "wall_s": round(time.time() - t0, 1),
        "cpu_s": round(time.process_time() - c0, 1),
        "out": str(out),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
