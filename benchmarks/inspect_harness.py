"""The Inspect AI side of the harness benchmark: the tag loop's two calls per sample (the image
with the tool-loop prompt, then the tagged image) through Inspect's OpenAI-compatible provider
against the same local test server. Runs in its own virtualenv (it never imports countgym):

    benchmarks/.venv-inspect/bin/python benchmarks/inspect_harness.py SPEC BASE_URL EPISODES SLOTS

``SPEC`` is the JSON written by ``bench_harness._inspect_spec``. Prints one JSON line: wall time,
CPU seconds of the run, calls, peak resident memory. The run is timed warm, as countgym's side
is: the imports and one warm-up ``eval`` of a single sample against the same server (Inspect's
start-up: its registry, logging and provider client) come before the timed window.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import sys
import tempfile
import time
from typing import Any


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main(spec_path: str, base_url: str, n_episodes: int, slots: int) -> dict[str, Any]:
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-not-a-key")
    from inspect_ai import Task, eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser, ContentImage, ContentText
    from inspect_ai.solver import Generate, TaskState, solver

    spec = json.loads(open(spec_path).read())
    by_id = {s["id"]: s for s in spec["samples"]}
    repeats = n_episodes // len(by_id)
    samples = [
        Sample(id=f"{s['id']}-r{r}", input="tag loop", metadata={"stimulus": s["id"]})
        for r in range(repeats)
        for s in spec["samples"]
    ]

    @solver
    def tag_loop() -> Any:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            s = by_id[state.metadata["stimulus"]]
            state.messages = [ChatMessageSystem(content=s["system"])]
            for image, text in s["turns"]:
                # What Inspect does with an image file in a sample: inline it as a data URL.
                with open(image, "rb") as f:
                    url = "data:image/png;base64," + base64.b64encode(f.read()).decode("ascii")
                state.messages.append(ChatMessageUser(content=[ContentImage(image=url), ContentText(text=text)]))
                state = await generate(state)
            return state

        return solve

    def run(task: Any, logs: str) -> Any:
        return eval(
            task,
            model="openai/blob",
            model_base_url=base_url,
            max_connections=slots,
            max_samples=slots,
            log_dir=logs,
            display="none",
            temperature=0.0,
            max_retries=0,
            model_args={"responses_api": False},  # the server speaks chat completions
        )

    with tempfile.TemporaryDirectory() as logs:
        run(Task(dataset=MemoryDataset(samples[:1]), solver=tag_loop()), logs + "/warm-up")
        task = Task(dataset=MemoryDataset(samples), solver=tag_loop())
        cpu0, t0 = _cpu_s(), time.perf_counter()
        result = run(task, logs + "/timed")
        wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
        log = result[0]
        n_calls = sum(sum(1 for m in s.messages if m.role == "assistant") for s in log.samples or [])
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "n_calls": n_calls,
        "episodes": len(log.samples or []),
        "status": log.status,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "total_cpu_s": _cpu_s(),
    }


if __name__ == "__main__":
    path, url, n, c = sys.argv[1:5]
    print(json.dumps(main(path, url, int(n), int(c))))
