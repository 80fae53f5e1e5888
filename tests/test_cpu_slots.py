"""CPU slots: no more CPU-heavy sections at once than slots, re-entrant within a thread, and a
concurrent cell's environment resets and steps run inside them (the model calls do not)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from countgym import cpu_slots
from countgym.envs.image_env import CountImageEnv
from countgym.logs import read_records
from countgym.runner import CellSpec, run_cell


class _Gauge:
    """Counts the threads inside a section and remembers the most at once."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self.lock = threading.Lock()

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


def test_no_more_sections_at_once_than_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_slots, "_SEMAPHORE", threading.BoundedSemaphore(2))
    gauge = _Gauge()

    def work() -> None:
        with cpu_slots.cpu_slot(), gauge:
            time.sleep(0.02)

    threads = [threading.Thread(target=work) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert gauge.peak == 2


def test_a_thread_in_a_slot_re_enters_without_a_second_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_slots, "_SEMAPHORE", threading.BoundedSemaphore(1))
    done = threading.Event()

    def nested() -> None:
        with cpu_slots.cpu_slot(), cpu_slots.cpu_slot(), cpu_slots.cpu_slot():
            pass
        with cpu_slots.cpu_slot():  # the slot was given back
            done.set()

    t = threading.Thread(target=nested)
    t.start()
    t.join(5)
    assert done.is_set()


def test_a_concurrent_cell_steps_its_environments_one_slot_at_a_time(
    tiny_dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one slot, eight concurrent episodes never reset or step two environments at once,
    and every episode still runs to its answer."""
    monkeypatch.setattr(cpu_slots, "_SEMAPHORE", threading.BoundedSemaphore(1))
    gauge = _Gauge()
    real_step, real_reset = CountImageEnv.step, CountImageEnv.reset

    def step(self, action):  # noqa: ANN001, ANN202
        with gauge:
            time.sleep(0.002)
            return real_step(self, action)

    def reset(self, *a, **k):  # noqa: ANN002, ANN003, ANN202
        with gauge:
            return real_reset(self, *a, **k)

    monkeypatch.setattr(CountImageEnv, "step", step)
    monkeypatch.setattr(CountImageEnv, "reset", reset)
    spec = CellSpec(dataset=str(tiny_dataset.root), agent="oracle", repeats=4)
    res = run_cell(spec, tmp_path, concurrency=8, progress=False)
    assert res.ran == 12 and res.errors == 0
    assert all(r.answer == r.truth.n for r in read_records([res.log]))
    assert gauge.peak == 1
