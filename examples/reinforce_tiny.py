"""REINFORCE on a tiny local VLM, end to end on CPU: vectorised rollouts, per-token log-probs, a
policy-gradient step, logging loss and mean return per step.

    python examples/reinforce_tiny.py                      # 15 steps x 16 episodes, ~20 s on 2 cores
    python examples/reinforce_tiny.py --model /path/to/SmolVLM-256M-Instruct   # a real model

Each episode is the ``direct`` protocol of *Give the Model a Finger* (one reply, ``ANSWER: n``)
on a small dot-array dataset made here. Every reply starts with the forced prefix ``"ANSWER: "``
so a randomly initialised model sometimes produces a parseable count; the reward is a custom
callable: 1 for the correct count, plus 0.2 for answering at all (a format bonus), so there is a
learning signal early on. With the defaults the share of parseable answers climbs from about
0 to about a half within 15 steps (the tiny model cannot see well enough to count). The loss is the REINFORCE estimator with the batch-mean
return as baseline:  ``-mean_i (R_i - mean R) * sum_t log pi(token_t | prompt_i)``.

One JSON line per step goes to stdout (and ``--log``): step, loss, mean_return, answered,
correct, seconds. Needs the ``local`` extra (torch, transformers); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tiny model is built here; never reach the hub

FORMAT_BONUS = 0.2


def count_reward(state: Any, stimulus: Any) -> float:
    """Custom reward: 1 for the right count, plus a bonus for answering at all."""
    answered = state.answer is not None
    return float(answered and state.answer == stimulus.n) + (FORMAT_BONUS if answered else 0.0)


def make_dataset(root: Path, counts: tuple[int, ...] = (1, 2, 3, 4), size: int = 96) -> Any:
    """Small white images with ``n`` black discs each (exact centres), as a dataset folder."""
    import numpy as np
    from PIL import Image, ImageDraw

    from countgym.stimulus import Dataset, Stimulus, write_manifest

    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True, exist_ok=True)
    stims = []
    for n in counts:
        cells = rng.permutation(9)[:n]  # a 3 x 3 lattice keeps discs apart
        pts = [((c % 3 + 0.5) * size / 3, (c // 3 + 0.5) * size / 3) for c in cells]
        im = Image.new("RGB", (size, size), "white")
        d = ImageDraw.Draw(im)
        for x, y in pts:
            d.ellipse([x - 6, y - 6, x + 6, y + 6], fill="black")
        rel = f"images/n{n}.png"
        im.save(root / rel)
        stims.append(Stimulus(id=f"n{n}", n=n, obj="dots", obj_sing="dot", image=rel, points=pts))
    write_manifest(root, stims)
    return Dataset(root)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=15, help="policy-gradient steps")
    ap.add_argument("--episodes", type=int, default=16, help="episodes per step")
    ap.add_argument("--envs", type=int, default=4, help="vectorised environments")
    # One token after the forced "ANSWER: " is enough for a count and keeps CPU steps short.
    ap.add_argument("--max-new-tokens", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None, help="a local model folder (default: build the tiny one)")
    ap.add_argument("--workdir", default=None, help="where the tiny model and data go (default: temp)")
    ap.add_argument("--log", default=None, help="also append the per-step JSON lines to this file")
    args = ap.parse_args(argv)
    if min(args.steps, args.episodes, args.envs, args.max_new_tokens) < 1:
        ap.error("--steps, --episodes, --envs and --max-new-tokens must be >= 1")

    import torch

    from countgym.rollout import LogProbModel, advantages, image_env_fns, make_vector_env, rollout

    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        model_path = args.model
        if model_path is None:
            from countgym.agents.backends.tiny import build_tiny_smolvlm

            model_path = str(build_tiny_smolvlm(work / "tiny-smolvlm"))
        ds = make_dataset(work / "data")
        model = LogProbModel(
            model_path,
            device="cpu",
            dtype="float32",
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            reply_prefix="ANSWER: ",
        )
        venv = make_vector_env(image_env_fns(ds, args.envs, prompt="direct", tools=(), budget=1, reward=count_reward))
        # The tiny model has no dropout; a real one would want .train() for the update only.
        opt = torch.optim.Adam(model.hf_model.parameters(), lr=args.lr)
        log = open(args.log, "a") if args.log else None  # noqa: SIM115 - closed in finally
        try:
            for step in range(args.steps):
                t0 = time.perf_counter()
                trajs = rollout(venv, model.policy, args.episodes, seed=args.seed + 1000 * step, keep_prompts=True)
                adv = advantages(trajs, by=None)  # baseline: the batch's mean return
                rows = [(s.prompt, s.token_ids, a) for t, a in zip(trajs, adv, strict=True) for s in t.steps if s.token_ids]
                lps = model.sequence_logprobs([r[0] for r in rows], [r[1] for r in rows])
                loss = -torch.stack([a * lp.sum() for (_, _, a), lp in zip(rows, lps, strict=True)]).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                line = {
                    "step": step,
                    "loss": float(loss.detach()),
                    "mean_return": sum(t.episode_return for t in trajs) / len(trajs),
                    "answered": sum(t.answer is not None for t in trajs) / len(trajs),
                    "correct": sum(t.answer == t.truth for t in trajs) / len(trajs),
                    "tokens": sum(len(r[1]) for r in rows),
                    "seconds": round(time.perf_counter() - t0, 3),
                }
                if not (math.isfinite(line["loss"]) and math.isfinite(line["mean_return"])):
                    print(f"non-finite values at step {step}: {line}", file=sys.stderr)
                    return 1
                print(json.dumps(line), flush=True)
                if log:
                    log.write(json.dumps(line) + "\n")
        finally:
            venv.close()
            if log:
                log.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
