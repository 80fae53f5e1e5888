"""Harness speed without changing what the model sees: the fast PNG encoder is lossless, each
distinct unmarked view is decoded and encoded once, observations stay fresh arrays, and a run
names the slow import before the first model call."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from countgym.agents.backends import base
from countgym.agents.backends.base import decode_data_url, png_data_url
from countgym.envs.actions import Tag
from countgym.envs.image_env import CountImageEnv
from countgym.stimulus import Dataset, Stimulus, write_manifest
from tests.conftest import make_tiny_dataset


def _originals():  # noqa: ANN202 - the module under test, imported when a test needs it
    from countgym.envs import originals

    return originals


ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("litellm", "torch", "transformers", "ray", "matplotlib", "pandas")


@pytest.mark.parametrize("shape", [(768, 768, 3), (1, 1, 3), (5, 7, 3), (3, 4), (6, 2, 4), (2, 9, 1), (9, 2, 3)])
def test_encode_png_is_lossless(shape: tuple[int, ...]) -> None:
    a = np.random.default_rng(len(shape) + shape[0]).integers(0, 256, shape, dtype=np.uint8)
    with Image.open(io.BytesIO(base.encode_png(a))) as im:
        back = np.asarray(im)
    assert np.array_equal(back.reshape(a.shape), a)


def test_encode_png_handles_views_and_other_dtypes() -> None:
    a = np.random.default_rng(1).integers(0, 256, (40, 30, 3), dtype=np.uint8)
    view = a[::-1, ::2]  # negative strides, not contiguous
    assert np.array_equal(decode_data_url("data:image/png;base64," + __import__("base64").b64encode(base.encode_png(view)).decode()), view)
    wide = (np.arange(12, dtype=np.uint16).reshape(3, 4) * 1000)  # 16-bit grey goes through Pillow
    with Image.open(io.BytesIO(base.encode_png(wide))) as im:
        assert np.array_equal(np.asarray(im).astype(np.uint16), wide)


def test_data_url_round_trips_a_tag_render(tiny_dataset: Dataset) -> None:
    env = CountImageEnv(tiny_dataset, tools=("tag",))
    obs, _ = env.reset(options={"stimulus_id": "four"})
    obs, *_ = env.step(Tag(points=[(130.0, 130.0), (390.0, 260.0)]))
    assert np.array_equal(decode_data_url(png_data_url(obs["image"])), obs["image"])


def test_each_unmarked_view_is_encoded_once_and_observations_stay_fresh(tmp_path: Path) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    first = [CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "two"})[0]["image"] for _ in range(3)]
    # Gymnasium's contract: new observation data on every call (no shared buffers) ...
    assert not np.shares_memory(first[0], first[1])
    assert not first[0].flags.writeable
    assert all(np.array_equal(first[0], f) for f in first[1:])
    # ... yet the view is never encoded: its file is what is sent (base64 per episode, no cache
    # entry to keep), the same bytes each time.
    encodes: list[int] = []
    real = base._encode
    base._encode = lambda a: encodes.append(1) or real(a)  # type: ignore[assignment]
    try:
        urls = [png_data_url(f) for f in first]
        assert urls[0] == urls[1] == urls[2] and not encodes
        assert png_data_url(first[0]) is urls[0]  # the episode's later turns: kept on the view
        other = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "four"})[0]["image"]
        assert png_data_url(other) != urls[0]
        # A source that must be encoded afresh (a colour-managed PNG) is encoded once per view:
        # the backends hand out the same data URL object.
        path = ds.image_path(ds["two"])
        with Image.open(path) as im:
            im.save(path, format="PNG", icc_profile=b"\0" * 16)
        views = [CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "two"})[0]["image"] for _ in range(3)]
        urls = [png_data_url(v) for v in views]
        assert urls[0] is urls[1] is urls[2] and len(encodes) == 1
        assert np.array_equal(decode_data_url(urls[0]), np.asarray(views[0]))
    finally:
        base._encode = real  # type: ignore[assignment]


def test_an_edited_image_file_is_read_again(tmp_path: Path) -> None:
    root = tmp_path / "d"
    (root / "images").mkdir(parents=True)
    Image.new("RGB", (64, 64), "white").save(root / "images" / "a.png")
    write_manifest(root, [Stimulus(id="a", n=0, obj="dots", obj_sing="dot", image="images/a.png", points=[])])
    ds = Dataset(root)
    before = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "a"})[0]["image"]
    im = Image.new("RGB", (64, 64), "white")
    ImageDraw.Draw(im).ellipse([10, 10, 30, 30], fill="black")
    im.save(root / "images" / "a.png")
    after = CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": "a"})[0]["image"]
    assert before.min() == 255 and after.min() == 0
    assert png_data_url(after) != png_data_url(before)


def test_the_shared_original_is_never_drawn_on(tiny_dataset: Dataset) -> None:
    env = CountImageEnv(tiny_dataset, tools=("tag",))
    clean, _ = env.reset(options={"stimulus_id": "row"})
    env.step(Tag(points=[(200.0, 500.0)]))
    again, _ = CountImageEnv(tiny_dataset, tools=("tag",)).reset(options={"stimulus_id": "row"})
    assert np.array_equal(clean["image"], again["image"])
    _originals().clear()
    fresh, _ = CountImageEnv(tiny_dataset, tools=("tag",)).reset(options={"stimulus_id": "row"})
    assert np.array_equal(fresh["image"], clean["image"])


def test_cache_is_bounded(tmp_path: Path) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    _originals().clear()
    for sid in ds.ids():
        CountImageEnv(ds, tools=("tag",)).reset(options={"stimulus_id": sid})
    assert len(_originals()._CACHE) == len(ds.ids()) <= _originals().MAX_ENTRIES


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **env}, timeout=300)


@pytest.mark.slow
def test_cli_and_run_entry_import_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "import countgym.cli\n"
        "from countgym.runner import run_cell\n"
        "from countgym.agents.registry import policy_factory\n"
        "from countgym.agents.backends import make_backend\n"
        "from countgym.agents.backends import litellm_backend\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["litellm", "auto"])
def test_a_cli_run_names_litellm_before_loading_it(tmp_path: Path, transport: str) -> None:
    pytest.importorskip("litellm")
    from countgym.testing.server import TestServer

    ds = make_tiny_dataset(tmp_path / "d")
    with TestServer() as srv:
        code = (
            "import sys\n"
            "from countgym import notices\n"
            "from countgym.cli import main, _announce_slow_imports\n"
            "seen = []\n"
            "_announce = _announce_slow_imports\n"
            "def spy():\n"
            "    _announce()\n"
            "    hook = notices.hook\n"
            "    notices.hook = lambda m: (seen.append('litellm' in sys.modules), hook(m))\n"
            "import countgym.cli as cli; cli._announce_slow_imports = spy\n"
            f"rc = main(['run', '--data', {str(ds.root)!r}, '--agent', 'direct', '--model', 'openai/blob',\n"
            f"           '--agent-option', 'api_base={srv.base_url}', '--out', {str(tmp_path / 'runs')!r},\n"
            f"           '--limit', '1', '--no-progress', '--agent-option', 'transport={transport}'])\n"
            "print('rc', rc, 'seen', seen, 'imported', 'litellm' in sys.modules)\n"
        )
        out = _python(code, OPENAI_API_KEY="sk-test-not-a-key")
    assert out.returncode == 0, out.stderr
    if transport == "litellm":
        assert "countgym: loading litellm" in out.stderr
        assert "rc 0 seen [False] imported True" in out.stdout  # said before the import, once
    else:  # openai/ with an api_base: the direct transport, which never imports litellm
        assert "loading litellm" not in out.stderr
        assert "rc 0 seen [] imported False" in out.stdout


@pytest.mark.slow
def test_library_use_prints_no_notice() -> None:
    out = _python("from countgym.agents.backends.litellm_import import load_litellm; load_litellm()",
                  LITELLM_LOCAL_MODEL_COST_MAP="True")
    assert out.returncode == 0, out.stderr
    assert "loading litellm" not in out.stderr


@pytest.mark.slow
def test_a_user_mistake_is_one_line_before_any_backend_loads(tmp_path: Path) -> None:
    ds = make_tiny_dataset(tmp_path / "d")
    (ds.root / "images" / "two.png").unlink()
    code = (
        "import sys\n"
        "from countgym.cli import main\n"
        f"rc = main(['run', '--data', {str(ds.root)!r}, '--agent', 'tag', '--model', 'openai/blob',\n"
        "           '--agent-option', 'api_base=http://127.0.0.1:9/v1', '--no-progress',\n"
        f"           '--out', {str(tmp_path / 'runs')!r}])\n"
        "print('rc', rc, 'litellm' in sys.modules)\n"
    )
    out = _python(code, OPENAI_API_KEY="sk-test-not-a-key")
    assert out.stdout.strip() == "rc 2 False", out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("countgym: error:") and "two.png" in lines[0]


def test_encoded_image_holds_the_png_and_gives_the_pixels_back() -> None:
    a = np.random.default_rng(2).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    enc = base.encoded_image(a)
    assert isinstance(enc, base.EncodedImage) and enc.shape == (30, 40, 3)
    assert png_data_url(enc) is enc.url == png_data_url(a)
    assert np.array_equal(np.asarray(enc), a) and np.asarray(enc, dtype=np.float32).dtype == np.float32
    assert "characters" in repr(enc) and len(repr(enc)) < 80
    odd = np.zeros((3, 3), np.float64)
    assert base.encoded_image(odd) is odd  # not a uint8 image: left as it is


@pytest.mark.slow
def test_pixels_are_released_while_the_model_call_is_in_flight(tiny_dataset: Dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    # Memory per episode in flight: once the request holds the image as PNG bytes, nothing
    # (runner, policy, history) keeps the tag render's pixels alive during the model call.
    import gc
    import weakref

    from countgym.agents.arms import arm_env_options, make_arm_policy
    from countgym.agents.backends.litellm_backend import LiteLLMBackend
    from countgym.runner import make_env, run_episode
    from countgym.testing.server import TestServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-release")
    renders: list[weakref.ref] = []
    real = CountImageEnv._observation

    def spy(self, *a, **kw):
        obs = real(self, *a, **kw)
        if self.state is not None and self.state.tags:
            renders.append(weakref.ref(obs["image"]))
        return obs

    monkeypatch.setattr(CountImageEnv, "_observation", spy)
    alive: list[bool] = []

    class Watching(LiteLLMBackend):
        def complete(self, messages, **kw):
            gc.collect()
            alive.extend(r() is not None for r in renders)
            images = [p["image"] for m in messages if isinstance(m.get("content"), list) for p in m["content"] if p.get("type") == "image"]
            assert all(isinstance(i, base.EncodedImage) for i in images)
            return super().complete(messages, **kw)

    with TestServer() as srv:
        be = Watching("openai/blob", api_base=srv.base_url)
        env = make_env(tiny_dataset, arm_env_options("tag"), arm="tag", model="openai/blob")
        rec = run_episode(env, make_arm_policy("tag", be), "four")
    assert rec.end == "answer" and renders  # the episode tagged, then answered
    assert alive and not any(alive)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_mmap_threshold_is_pinned_once_unless_the_user_set_it() -> None:
    code = "from countgym.malloc import pin_mmap_threshold as p; print(p(), p())"
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_ARENA_MAX")}
    libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == (["True", "True"] if libc and libc.startswith("glibc") else ["False", "False"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "MALLOC_MMAP_THRESHOLD_": "65536"})
    assert out.stdout.split() == ["False", "False"]  # the user's own setting stays
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "MALLOC_ARENA_MAX": "4"})
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_pinned_allocator_reuses_image_buffers_instead_of_faulting_in_fresh_ones() -> None:
    """After pinning, a 768 x 768 RGB render buffer comes from the heap again (a handful of page
    faults), not from a fresh mmap (about 430 faults, a quarter of the harness's CPU per call)."""
    code = (
        "import resource, threading, numpy as np\n"
        "from countgym.malloc import pin_mmap_threshold\n"
        "print(pin_mmap_threshold())\n"
        "def faults():\n"
        "    for _ in range(20): np.ones(768 * 768 * 3, np.uint8)\n"
        "    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "    for _ in range(100): np.ones(768 * 768 * 3, np.uint8)\n"
        "    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 100)\n"
        "ts = [threading.Thread(target=faults) for _ in range(4)]\n"
        "[t.start() or t.join() for t in ts]\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_ARENA_MAX")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    pinned, *per_alloc = out.stdout.split()
    if pinned != "True":
        pytest.skip("not glibc")
    assert max(map(float, per_alloc)) < 50, per_alloc


def test_concurrent_cells_pin_the_threshold(tiny_dataset: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from countgym import runner
    from countgym.agents.scripted import Oracle

    pinned: list[int] = []
    monkeypatch.setattr(runner, "pin_mmap_threshold", lambda: pinned.append(1) or True)
    spec = runner.CellSpec(dataset=str(tiny_dataset.root), agent="oracle", env_options={"tools": ["tag"]})
    runner.run_cell(spec, tmp_path / "a", policy_factory=Oracle, dataset=tiny_dataset, concurrency=1, progress=False)
    assert pinned == []
    runner.run_cell(spec, tmp_path / "b", policy_factory=Oracle, dataset=tiny_dataset, concurrency=4, progress=False)
    assert pinned == [1]
