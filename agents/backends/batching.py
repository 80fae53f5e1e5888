"""Batched generation for local models across concurrently running episodes.

The run engine steps each episode in its own thread. ``BatchingBackend`` collects the
``complete`` calls those threads make and hands them to the wrapped backend's ``complete_batch``
as one batch (up to ``max_batch`` requests, waiting at most ``max_wait_s`` for a batch to fill),
so a local transformers model generates for many episodes at once while each episode keeps its
own simple sequential loop.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from countgym.agents.backends.base import BaseChatModel, ChatModel, Message
from countgym.envs.actions import Reply


class BatchingBackend(BaseChatModel):
    """Coalesces concurrent ``complete`` calls into ``complete_batch`` calls of the inner model."""

    def __init__(self, inner: ChatModel, *, max_batch: int = 8, max_wait_s: float = 0.02) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.inner = inner
        self.model = getattr(inner, "model", "")
        self.max_batch = int(max_batch)
        self.max_wait_s = float(max_wait_s)
        self.batch_sizes: list[int] = []
        """Sizes of the batches sent so far (for tests and tuning)."""
        self._pending: list[tuple[list[Message], Future[Reply]]] = []
        self._cv = threading.Condition()
        self._worker = threading.Thread(target=self._loop, name="countgym-batcher", daemon=True)
        self._worker.start()

    def complete(self, messages: list[Message]) -> Reply:
        fut: Future[Reply] = Future()
        with self._cv:
            self._pending.append((messages, fut))
            self._cv.notify_all()
        return fut.result()

    def complete_batch(self, batch: Any) -> list[Reply]:
        return self.inner.complete_batch(batch)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._pending:
                    self._cv.wait()
                # Give the other episode threads a moment to submit their turn.
                self._cv.wait_for(lambda: len(self._pending) >= self.max_batch, timeout=self.max_wait_s)
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            self.batch_sizes.append(len(batch))
            try:
                replies = self.inner.complete_batch([m for m, _ in batch])
                if len(replies) != len(batch):
                    raise RuntimeError(f"complete_batch returned {len(replies)} replies for {len(batch)} requests")
            except Exception as e:  # noqa: BLE001 - a failed batch fails its episodes, not the worker
                replies = [Reply(text="", error=f"batched generation failed: {type(e).__name__}: {e}")] * len(batch)
            for (_, fut), reply in zip(batch, replies, strict=True):
                fut.set_result(reply)
