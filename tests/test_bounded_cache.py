"""The bounded LRU cache the harness keeps its originals, decoded views and view encodings in."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
from PIL import Image

from countgym.agents.backends import base as backend_base
from countgym.agents.backends.base import png_data_url
from countgym.bounded_cache import BoundedCache
from countgym.envs import originals
from countgym.envs.image_env import CountImageEnv
from countgym.stimulus import Dataset, Stimulus, write_manifest


def _sized(max_entries: int = 100, max_size: int = 100) -> tuple[BoundedCache[str, bytes], list[bytes]]:
    measured: list[bytes] = []

    def size_of(v: bytes) -> int:
        measured.append(v)
        return len(v)

    return BoundedCache(max_entries, max_size, size_of), measured


def test_least_recently_used_goes_first_by_entries() -> None:
    cache, _ = _sized(max_entries=3)
    for k in "abc":
        cache.put(k, b"x")
    assert cache.get("a") == b"x"  # a is now the most recent
    cache.put("d", b"x")
    assert [k for k, _ in cache.items()] == ["c", "a", "d"]
    assert cache.get("b") is None and len(cache) == 3 and "b" not in cache


def test_size_bound_and_running_total() -> None:
    cache, _ = _sized(max_size=10)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    assert cache.size == 8
    cache.put("c", b"123")  # 11 > 10: the oldest goes
    assert [k for k, _ in cache.items()] == ["b", "c"] and cache.size == 7
    cache.put("b", b"1")  # replacing counts the new size only
    assert cache.size == 4 and [k for k, _ in cache.items()] == ["c", "b"]
    cache.put("big", b"x" * 50)  # the newest is kept however large
    assert [k for k, _ in cache.items()] == ["big"] and cache.size == 50
    cache.clear()
    assert len(cache) == 0 and cache.size == 0


def test_an_insert_measures_only_the_new_entry() -> None:
    """No sum over the cache per insert: 1,000 inserts measure 1,000 values."""
    cache, measured = _sized(max_entries=10_000, max_size=10**9)
    for i in range(1000):
        cache.put(str(i), b"x" * (i % 7))
    assert len(measured) == 1000
    assert cache.size == sum(i % 7 for i in range(1000))


def test_resized_recounts_only_the_entry_kept() -> None:
    cache, _ = _sized(max_size=10)
    value = bytearray(b"1234")
    cache.put("a", value)  # type: ignore[arg-type]
    value.extend(b"5678")
    cache.resized("a", value)  # type: ignore[arg-type]
    assert cache.size == 8
    cache.resized("a", bytearray(b"other value"))  # not the entry kept: ignored
    cache.resized("gone", value)  # type: ignore[arg-type]
    assert cache.size == 8
    cache.put("b", b"123")  # 11 > 10 with the recount: a goes
    assert [k for k, _ in cache.items()] == ["b"] and cache.size == 3


def test_threads_keep_the_total_exact() -> None:
    cache: BoundedCache[int, bytes] = BoundedCache(50, 2000, len)

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(2000):
            k = int(rng.integers(0, 200))
            if rng.random() < 0.5:
                cache.put(k, b"x" * int(rng.integers(0, 100)))
            else:
                cache.get(k)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kept = cache.items()
    assert cache.size == sum(len(v) for _, v in kept) <= 2000 and len(kept) <= 50


def test_kept_originals_are_counted_as_they_change(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An original lets go of its pixels once encoded (``keep_encoded``): the cache's total
    follows, so the byte bound stays true without a sum over the cache."""
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(tmp_path / "derived"))
    rng = np.random.default_rng(0)
    (tmp_path / "d" / "images").mkdir(parents=True)
    stims = []
    for i in range(4):
        yy, xx = np.mgrid[0:96, 0:128]
        smooth = (xx + yy + 20 * i)[..., None] * np.array([1.0, 0.7, 0.4]) + rng.normal(0, 2, (96, 128, 3))
        img = np.clip(smooth, 0, 255).astype(np.uint8)  # photo-like: no runs, a PNG smaller than it
        Image.fromarray(img).save(tmp_path / "d" / "images" / f"n{i}.bmp")
        stims.append(Stimulus(id=f"n{i}", image=f"images/n{i}.bmp", n=1, obj="dots", obj_sing="dot", points=None))
    write_manifest(tmp_path / "d", stims)
    ds = Dataset(tmp_path / "d")
    originals.clear()
    backend_base._VIEW_URLS.clear()
    env = CountImageEnv(ds, tools=("tag",))
    for sid in ds.ids():
        obs, _ = env.reset(options={"stimulus_id": sid})
        before = originals._CACHE.size
        png_data_url(obs["image"])  # the original now holds the PNG, not its pixels
        assert originals._CACHE.size < before
    kept = originals._CACHE.items()
    assert len(kept) == 4 and all(e.png() is not None for _, e in kept)
    assert originals._CACHE.size == sum(e.held_bytes() for _, e in kept)
