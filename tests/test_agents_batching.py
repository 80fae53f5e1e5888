"""Batched generation across concurrent episodes: the run engine's path for local models."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from countgym.agents.backends.base import BaseChatModel
from countgym.agents.backends.batching import BatchingBackend
from countgym.envs.actions import Reply
from countgym.logs import read_records
from countgym.runner import CellSpec, run_cell
from tests.test_agents_transformers import tiny_model  # noqa: F401 - pytest fixture


class Echo(BaseChatModel):
    model = "echo"

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def complete_batch(self, batch):
        self.sizes.append(len(batch))
        time.sleep(0.01)
        return [Reply(text=f"ANSWER: {len(m)}") for m in batch]


class Broken(BaseChatModel):
    def complete_batch(self, batch):
        raise RuntimeError("out of memory")


def test_concurrent_calls_are_coalesced_and_answered_in_order() -> None:
    inner = Echo()
    b = BatchingBackend(inner, max_batch=4, max_wait_s=0.5)
    out: dict[int, str] = {}

    def call(i: int) -> None:
        out[i] = b.complete([{"role": "user", "content": []}] * (i + 1)).text

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert out == {i: f"ANSWER: {i + 1}" for i in range(8)}
    assert max(inner.sizes) > 1 and sum(inner.sizes) == 8


def test_failed_batch_becomes_error_replies() -> None:
    b = BatchingBackend(Broken(), max_batch=2, max_wait_s=0.01)
    r = b.complete([])
    assert r.error and "out of memory" in r.error


def test_run_cell_batches_a_local_model(tiny_model: str, tiny_dataset, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    made: list[BatchingBackend] = []
    init = BatchingBackend.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(BatchingBackend, "__init__", spy)
    spec = CellSpec(dataset=str(tiny_dataset.root), agent="direct", model=f"hf:{tiny_model}",
                    agent_options={"max_new_tokens": 4}, repeats=2)
    res = run_cell(spec, tmp_path, concurrency=3, progress=False)
    recs = read_records([res.log])
    assert res.ran == 6 and len(recs) == 6
    assert all(r.end in ("answer", "invalid") and r.steps[0].usage.prompt_tokens > 0 for r in recs)
    (batcher,) = made
    assert sum(batcher.batch_sizes) == 6 and max(batcher.batch_sizes) > 1
