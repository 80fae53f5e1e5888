"""Configs, flags, manifests and media paths are validated: one line on stderr, exit 2, no hang."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest
from PIL import Image

from countgym.cli import main
from countgym.errors import UserError
from countgym.runner import CellSpec, run_cell
from countgym.stimulus import Dataset, Stimulus, write_manifest

PLUGINS = str(Path(__file__).parent / "plugins")
HEAD = 'datasets = ["dotarrays"]\narms = ["tag"]\nmodels = ["openai/x"]\n'


def _one_line_exit_2(args: list[str], capsys: pytest.CaptureFixture) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(args))
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# --- sweep configs ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('ablations = [{verify = "false"}]\n', "verify = 'false'"),  # ran with verification on
        ("ablations = [{numbered = 0}]\n", "numbered = 0"),
        ('ablations = [{}, {order = "backwards"}]\n', "ablation 2: order"),
        ('ablations = [{extra_tools = "crop"}]\n', "extra_tools"),
        ('ablations = [{blur_radius = "8"}]\n', "blur_radius = '8'"),
        ("ablations = [{blur_radius = nan}]\n", "blur_radius = nan"),
        ("ablations = [{feather = -1}]\n", "feather = -1"),
        ("ablations = [{tool_cost = inf}]\n", "tool_cost = inf"),
        ("repeats = true\n", "repeats"),
        ("repeats = 1.5\n", "repeats"),
        ('repeats = "3"\n', "repeats"),
        ("repeats = 1e9\n", "repeats"),
        ("repeats = 1000000000\n", "repeats"),
        ("concurrency = 100000000\n", "concurrency"),
        ("limit = true\n", "limit"),
        ("max_cost = nan\n", "max_cost"),
        ("max_cost = -1\n", "max_cost"),
        ("max_cost = inf\n", "max_cost"),
        ('max_cost = "5"\n', "max_cost"),
        ("budgets = [-1]\n", "budgets"),
        ("seed = -1\n", "seed"),
        ('arms = ["oracle"]\n', "cannot parse"),  # TOML duplicate key
    ],
)
def test_sweep_values_are_type_checked(tmp_path: Path, body: str, needle: str, capsys) -> None:
    p = tmp_path / "s.toml"
    p.write_text(HEAD + body)
    err = _one_line_exit_2(["sweep", str(p), "--dry-run"], capsys)
    assert needle in err


def test_valid_ablations_still_expand(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")  # the dry run checks a hosted model's key
    p = tmp_path / "s.toml"
    p.write_text(HEAD + 'ablations = [{}, {verify = false}, {order = "reverse"}, {extra_tools = ["crop"]}]\nmax_cost = 5\nrepeats = 3\n')
    assert main(["sweep", str(p), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 cells" in out and "verify=False" in out


def _alias_bomb(levels: int = 9) -> str:
    lines = ['    a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"    a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "datasets: [dotarrays]\narms: [oracle]\nagent_options:\n  oracle:\n" + "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    p = tmp_path / "bomb.yaml"
    p.write_text(_alias_bomb())
    assert len(p.read_bytes()) < 600
    env = {**os.environ, "PYTHONPATH": PLUGINS}
    r = subprocess.run([sys.executable, "-m", "countgym", "sweep", str(p), "--dry-run"],
                       capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "aliases" in r.stderr and "line 6" in r.stderr


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("datasets: [dotarrays]\narms: [oracle]\narms: [tag]\n", "line 3: duplicate key 'arms'"),
        ("datasets: [dotarrays]\narms: [oracle]\nablations:\n  - {verify: false, verify: true}\n", "duplicate key 'verify'"),
        ("datasets: [dotarrays]\narms: [oracle]\nmodel_options:\n  m1: &b {max_tokens: 5}\n  m2: *b\n", "line 5: YAML aliases"),
        ("- just\n- a list\n", "top level"),
        ("datasets: [dotarrays]\narms: [oracle]\nablations: [{verify: 'no'}]\n", "verify = 'no'"),
    ],
)
def test_yaml_duplicates_aliases_and_shapes_are_errors(tmp_path: Path, text: str, needle: str, capsys) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    assert needle in _one_line_exit_2(["sweep", str(p), "--dry-run"], capsys)


def test_sweep_config_not_utf8_is_a_user_error(tmp_path: Path, capsys) -> None:
    p = tmp_path / "s.toml"
    p.write_bytes(HEAD.encode() + b"out = '\xff\xfe'\n")
    assert "not UTF-8" in _one_line_exit_2(["sweep", str(p)], capsys)


# --- run flags -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--max-cost", "-1"], "--max-cost"),
        (["--max-cost", "nan"], "--max-cost"),
        (["--max-cost", "inf"], "--max-cost"),
        (["--max-cost", "lots"], "--max-cost"),
        (["--repeats", "1001"], "--repeats"),
        (["--repeats", "1e9"], "--repeats"),
        (["--concurrency", "100000"], "--concurrency"),
        (["--budget", "99999999999999999999"], "--budget"),
        (["--budget", "-1"], "--budget"),
    ],
)
def test_run_flags_are_checked(flags: list[str], needle: str, capsys) -> None:
    # A missing dataset: a flag accepted by mistake must not start a real run.
    assert needle in _one_line_exit_2(["run", "--data", "/nonexistent/countgym-data", "--agent", "oracle", *flags], capsys)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_cost": float("nan")}, "--max-cost"),
        ({"max_cost": -1.0}, "--max-cost"),
        ({"concurrency": 0}, "--concurrency"),
        ({"concurrency": True}, "--concurrency"),
    ],
)
def test_run_cell_checks_settings_like_the_cli(tmp_path: Path, kwargs: dict, needle: str) -> None:
    # Checked before the dataset is even looked up (a missing one here): no episode could start.
    missing = "/nonexistent/countgym-data"
    with pytest.raises(UserError, match=needle):
        run_cell(CellSpec(dataset=missing, agent="oracle"), tmp_path, progress=False, **kwargs)
    with pytest.raises(UserError, match="--repeats"):
        run_cell(CellSpec(dataset=missing, agent="oracle", repeats=10**9), tmp_path, progress=False)


def test_path_mistakes_exit_2(tiny_dataset, tmp_path: Path, capsys) -> None:
    (tmp_path / "afile").write_text("x")
    err = _one_line_exit_2(["run", "--data", str(tiny_dataset.root), "--agent", "oracle", "--out", str(tmp_path / "afile" / "x"), "--no-progress"], capsys)
    assert "a file is in the way" in err
    (tmp_path / "runs").mkdir()
    assert main(["run", "--data", str(tiny_dataset.root), "--agent", "oracle", "--out", str(tmp_path / "runs"), "--no-progress"]) == 0
    assert "afile" in _one_line_exit_2(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "afile")], capsys)


# --- test server flags -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--port", "99999"], "port"),
        (["--port", "-1"], "port"),
        (["--faults", "429=5"], "from 0 to 1"),
        (["--faults", "429=-1"], "from 0 to 1"),
        (["--faults", "429=nan"], "from 0 to 1"),
        (["--faults", "429=0.7,500=0.7"], "add up"),
        (["--latency", "-1"], "latency"),
        (["--latency", "inf"], "latency"),
        (["--retry-after", "nan"], "retry-after"),
        (["--port", "x"], "--port"),
    ],
)
def test_testserver_flags_are_checked(flags: list[str], needle: str, capsys, monkeypatch) -> None:
    import time

    from countgym.testing import server as testserver

    class _ServeNoLonger:
        """A server that did start (a flag accepted by mistake) stops at its first wait."""

        def sleep(self, _s: float) -> None:
            raise KeyboardInterrupt

        def __getattr__(self, name: str) -> object:
            return getattr(time, name)

    monkeypatch.setattr(testserver, "time", _ServeNoLonger())
    err = _one_line_exit_2(["testserver", *flags], capsys)
    assert needle in err and err.startswith("countgym testserver: error:")


def test_testserver_class_refuses_bad_settings() -> None:
    from countgym.testing import TestServer

    for kwargs in ({"faults": {"429": 1.5}}, {"port": 70000}, {"latency_s": float("nan")}, {"retry_after": -1}):
        with pytest.raises(ValueError):
            TestServer(**kwargs)


# --- manifests -------------------------------------------------------------------------------
GOOD = '{"id": "a", "n": 1, "obj": "dots", "obj_sing": "dot"}'


@pytest.mark.parametrize(
    ("line2", "needle"),
    [
        ('{"id": "b", "n": "many", "obj": "dots", "obj_sing": "dot"}', ":2: invalid manifest line: field 'n'"),
        ('{"id": "b", "n": 1, "obj": "dots"}', ":2: invalid manifest line: field 'obj_sing': Field required"),
        ('{"id": "b", "n": 1, "obj": "dots", "obj_sing": "dot", "colour": "red"}', "field 'colour'"),
        ('{"id": "b", "n": 1, "obj": "dots", "obj_sing": "dot", "points": [[NaN, 1]]}', "field 'points.0.0'"),
        ('{"id": "b", "n": 2, "obj": "dots", "obj_sing": "dot", "points": [[1, 1]]}', "field 'points': 1 points given for n=2"),
        ('{"id": "a", "n": 1, "obj": "dots", "obj_sing": "dot"}', ":2: field 'id': duplicate stimulus id 'a' (first on line 1)"),
        ("[1, 2]", ":2: invalid manifest line: expected a JSON object"),
        ('{"id": "b", "n": ' + "9" * 4301 + "}", ":2: invalid manifest line"),
        ("[" * 100_000 + "]" * 100_000, ":2: invalid manifest line: nested too deeply"),
    ],
)
def test_manifest_errors_name_the_field_and_line(tmp_path: Path, line2: str, needle: str, capsys) -> None:
    (tmp_path / "manifest.jsonl").write_text(GOOD + "\n" + line2 + "\n")
    err = _one_line_exit_2(["run", "--data", str(tmp_path), "--agent", "oracle", "--out", str(tmp_path / "r")], capsys)
    assert needle in err and len(err) < 400


def test_manifest_not_utf8_names_the_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "manifest.jsonl").write_bytes(GOOD.encode() + b'\n{"id": "\xff", "n": 1}\n')
    assert ":2: invalid manifest line: not UTF-8" in _one_line_exit_2(
        ["run", "--data", str(tmp_path), "--agent", "oracle", "--out", str(tmp_path / "r")], capsys
    )


# --- media paths -----------------------------------------------------------------------------
def _dots_folder(root: Path, image_for_b: str) -> None:
    (root / "images").mkdir(parents=True)
    Image.new("RGB", (64, 64), "white").save(root / "images" / "a.png")
    write_manifest(root, [
        Stimulus(id="a", n=0, obj="dots", obj_sing="dot", image="images/a.png"),
        Stimulus(id="b", n=0, obj="dots", obj_sing="dot", image=image_for_b),
    ])  # fmt: skip


def test_fifo_named_png_is_refused_not_read(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _dots_folder(data, "images/b.png")
    os.mkfifo(data / "images" / "b.png")  # opening it for reading would block forever
    env = {**os.environ, "PYTHONPATH": PLUGINS}
    r = subprocess.run([sys.executable, "-m", "countgym", "run", "--data", str(data), "--agent", "blob-counter",
                        "--out", str(tmp_path / "runs"), "--no-progress"],
                       capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "'b': images/b.png is not a regular file" in r.stderr
    ds = Dataset(data)  # the library path refuses it too, without opening it
    with pytest.raises(UserError, match="image path 'images/b.png' is not a regular file"):
        ds.load_image(ds["b"])
    with pytest.raises(UserError, match="not a regular file"):
        ds.content_hash(ds["b"])


def _png_header_only(path: Path, w: int, h: int) -> None:
    """A PNG whose header says w x h (no pixel data): the size check must refuse it unread."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))


def test_image_guard_is_the_stated_64_megapixels(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _dots_folder(data, "images/big.png")
    _png_header_only(data / "images" / "big.png", 8001, 8000)  # 64.008 MP: Pillow itself only warns
    ds = Dataset(data)
    with pytest.raises(UserError, match="over the 64 MP limit"):
        ds.load_image(ds["b"])
    _png_header_only(data / "images" / "big.png", 8000, 8000)  # exactly 64 MP passes the guard
    with pytest.raises(UserError, match="cannot read image"):  # (and fails later: no pixels)
        ds.load_image(ds["b"])


def test_countercount_mask_outside_the_dataset_is_refused(tmp_path: Path) -> None:
    from countgym.envs.cf_env import CounterCountEnv

    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    Image.new("RGB", (64, 64), "white").save(data / "images" / "f.png")
    Image.new("L", (64, 64), 255).save(tmp_path / "outside.png")
    meta = {"subject": "dog", "attribute": "leg", "category": "animal", "canonical_count": 4, "cf_count": 5,
            "kind": "cf", "pair_id": "p", "bbox": [0, 0, 32, 32], "mask": "../outside.png"}  # fmt: skip
    write_manifest(data, [Stimulus(id="p-cf", n=5, obj="legs", obj_sing="leg", image="images/f.png", meta=meta)])
    env = CounterCountEnv(str(data), expose_region=True)
    with pytest.raises(UserError, match="mask path '../outside.png' escapes the dataset folder"):
        env.reset(seed=0)


# --- downloader ------------------------------------------------------------------------------
def test_downloader_follows_no_redirect_to_a_refused_scheme(tmp_path: Path) -> None:
    from countgym.scenes.photos.download import download_images

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(302)
            self.send_header("Location", "ftp://127.0.0.1:1/x.png" if self.path == "/ftp" else "file:///etc/passwd")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        rep = download_images([(f"{base}/ftp", None), (f"{base}/file", None)], tmp_path, retries=1,
                              backoff_s=0.01, timeout=5, progress=False)  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    reasons = dict(rep.dead)
    assert rep.failed == () and rep.downloaded == 0
    assert "redirected to a ftp URL" in reasons[f"{base}/ftp"]
    assert f"{base}/file" in reasons  # refused by urllib itself (HTTP 302 not followed)


def test_download_report_lists_are_json_friendly(tmp_path: Path) -> None:
    # Guard for the test above: a dead reason is a plain one-line string.
    from countgym.scenes.photos.download import RejectedImage

    assert json.dumps(str(RejectedImage("x"))) == '"x"'


def test_sweep_budget_out_of_range_is_a_user_error(tmp_path: Path, tiny_dataset, capsys) -> None:
    p = tmp_path / "s.toml"
    p.write_text(f"datasets = [{str(tiny_dataset.root)!r}]\narms = ['oracle']\nbudgets = [10000]\nout = {str(tmp_path / 'runs')!r}\n")
    assert "budget" in _one_line_exit_2(["sweep", str(p), "--no-progress"], capsys)
