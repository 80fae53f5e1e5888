"""The test server's answer noise (``countgym testserver --noise SIGMA``): which prompt gets how
much, determinism given the seed, the CLI, and a keyless sweep whose arms really differ."""

from __future__ import annotations

import base64
import csv
import io
import json
import statistics
import urllib.request
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from countgym.cli import main
from countgym.envs import cf_templates as CT
from countgym.envs import templates as T
from countgym.envs import video_templates as VT
from countgym.stimulus import Stimulus, write_manifest
from countgym.testing import server as testserver
from countgym.testing.noise import DUPLICATE_OFFSET, NOISE_SCALE
from countgym.testing.server import TestServer, model_reply, prompt_kind

N = 36


def grid_image(n: int = N, size: int = 768) -> str:
    """A data URL of ``n`` black discs on a 6-column grid."""
    im = Image.new("RGB", (size, size), "white")
    d = ImageDraw.Draw(im)
    for i in range(n):
        x, y = 80 + (i % 6) * 120, 80 + (i // 6) * 120
        d.ellipse([x - 14, y - 14, x + 14, y + 14], fill="black")
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


IMAGE = grid_image()


def user(text: str, url: str | None = IMAGE) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": url}}] if url else []
    return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}


def tool_first_turn() -> list[dict]:
    return [{"role": "system", "content": T.system_prompt("dots", "dot", ("tag",), 6)},
            user(T.first_user_message("dots", "dot"))]  # fmt: skip


PROMPTS = {
    "direct": [user(T.DIRECT.format(obj="dots"))],
    "cot": [user(T.COT.format(obj="dots"))],
    "list": [user(T.LIST.format(obj="dots", obj_sing="dot"))],
    "tile": [user(T.TILE.format(obj="dots", obj_sing="dot"))],
    "tool": tool_first_turn(),
    "cf-mcq": [user(CT.fill_question(CT.MCQ, anomaly="leg", anomaly_plural="legs", name="dog",
                                     options="three, four, five, six"))],  # fmt: skip
    "cf-oe": [user(CT.fill_question(CT.OE, anomaly="leg", anomaly_plural="legs", name="dog"))],
    **{f"video-{k}": [user(v.format(color="red", shape="cube"))] for k, v in VT.PROMPTS.items()},
    "parser": [user(VT.PARSER.format(question="How many?", response="I see 4"), None)],
}


def answer_of(reply: str) -> int:
    """The count a reply commits to: its ANSWER line, or the number of points it tags."""
    last = reply.strip().splitlines()[-1]
    if last.startswith("ANSWER:"):
        return int(last.split(":")[1])
    return len(json.loads(last)["points"])


@pytest.mark.parametrize("kind", list(PROMPTS))
def test_prompt_kind_recognises_every_protocol_prompt(kind: str) -> None:
    assert prompt_kind(PROMPTS[kind]) == kind


def test_no_noise_is_the_exact_blob_count() -> None:
    for kind in ("direct", "cot", "list", "tool", "cf-oe", "video-P2"):
        assert answer_of(model_reply(PROMPTS[kind])) == N, kind
        assert model_reply(PROMPTS[kind], noise=0.0, seed=5) == model_reply(PROMPTS[kind])


def _errors(kind: str, sigma: float = 0.1, seeds: range = range(60)) -> list[int]:
    return [answer_of(model_reply(PROMPTS[kind], noise=sigma, seed=s)) - N for s in seeds]


@pytest.mark.slow
def test_noise_size_follows_the_arm_and_the_prompt() -> None:
    mae = {k: statistics.mean(abs(e) for e in _errors(k)) for k in ("tool", "list", "direct", "video-P2", "video-P3")}
    # Expected mean |error| ~ 0.8 * SIGMA * scale * n: tool 0.7, list 1.7, direct 2.9, P2 2.0, P3 4.0.
    assert mae["tool"] < 1.2 and mae["direct"] > 2.0
    assert mae["tool"] * 1.5 < mae["list"] < mae["direct"]
    assert mae["video-P2"] * 1.4 < mae["video-P3"]
    assert NOISE_SCALE["tool"] < NOISE_SCALE["direct"]
    # The answer parser is no counting prompt: never perturbed.
    assert {model_reply(PROMPTS["parser"], noise=0.5, seed=s) for s in range(10)} == {"4"}


def test_noise_is_deterministic_given_the_seed_and_differs_between_seeds() -> None:
    for kind in ("direct", "tool", "video-P1"):
        assert model_reply(PROMPTS[kind], noise=0.2, seed=7) == model_reply(PROMPTS[kind], noise=0.2, seed=7)
    assert len({answer_of(model_reply(PROMPTS["direct"], noise=0.2, seed=s)) for s in range(20)}) > 3


def test_tag_noise_drops_points_or_adds_near_copies_and_jitters() -> None:
    exact = json.loads(model_reply(PROMPTS["tool"]).splitlines()[-1])["points"]
    seen_fewer = seen_more = False
    for s in range(40):
        pts = json.loads(model_reply(PROMPTS["tool"], noise=0.3, seed=s).splitlines()[-1])["points"]
        assert all(0 <= v <= 1000 for p in pts for v in p)
        seen_fewer |= len(pts) < len(exact)
        seen_more |= len(pts) > len(exact)
        # Every point lies near a detected one (jitter sd 0.3 * 0.25 * 100 = 7.5 units).
        for x, y in pts:
            assert min(abs(x - a) + abs(y - b) for a, b in exact) <= 2 * (DUPLICATE_OFFSET + 40)
    assert seen_fewer and seen_more


def _post(url: str, messages: list[dict]) -> str:
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps({"model": "blob", "messages": messages}).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"]


def test_http_server_applies_its_noise_reproducibly() -> None:
    replies = []
    for _ in range(2):
        with TestServer(noise=0.2, seed=11) as srv:
            replies.append([_post(srv.base_url, PROMPTS["direct"]) for _ in range(2)])
    assert replies[0] == replies[1] and replies[0][0] == replies[0][1]  # same request, same reply
    assert replies[0][0] == model_reply(PROMPTS["direct"], noise=0.2, seed=11)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), True, "0.1"])
def test_bad_noise_is_a_one_line_error(bad: object) -> None:
    with pytest.raises(ValueError, match="noise must be a finite number >= 0"):
        TestServer(noise=bad)  # type: ignore[arg-type]


def test_cli_noise_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert testserver.main(["--noise", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "noise must be a finite number >= 0" in err
    assert testserver.main(["--noise", "nan"]) == 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        testserver.main(["--noise", "lots"])
    assert e.value.code == 2 and "--noise" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["testserver", "--help"])
    assert e.value.code == 0
    helptext = " ".join(capsys.readouterr().out.split())
    assert "--noise SIGMA" in helptext and "tool loop 0.25" in helptext


# --- a keyless sweep whose arms differ ------------------------------------------------------------


def _disc_dataset(root: Path) -> Path:
    """Twelve 512 x 512 images of 25-36 black discs with exact centres."""
    (root / "images").mkdir(parents=True)
    stims = []
    for k, n in enumerate(range(25, 37)):
        im = Image.new("RGB", (512, 512), "white")
        d = ImageDraw.Draw(im)
        pts = [[40.0 + (i % 6) * 80, 40.0 + (i // 6) * 80] for i in range(n)]
        for x, y in pts:
            d.ellipse([x - 10, y - 10, x + 10, y + 10], fill="black")
        im.save(root / f"images/s{k}.png")
        stims.append(Stimulus(id=f"s{k}", n=n, obj="dots", obj_sing="dot", image=f"images/s{k}.png", points=pts))
    write_manifest(root, stims)
    return root


def _sweep_summary(tmp: Path, data: Path, api_base: str) -> dict[str, dict[str, str]]:
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = tmp / "sweep.toml"
    cfg.write_text(f'''
out = "{tmp / "runs"}"
datasets = ["{data}"]
arms = ["direct", "tag"]
models = ["openai/blob"]
concurrency = 4
[model_options."openai/blob"]
api_base = "{api_base}"
''')
    assert main(["sweep", str(cfg), "--no-progress"]) == 0
    assert main(["audit", str(tmp / "runs"), "--out", str(tmp / "audit"), "--resamples", "200",
                 "--viewer-episodes", "0"]) == 0  # fmt: skip
    with open(tmp / "audit" / "summary.csv", newline="") as f:
        return {row["arm"]: row for row in csv.DictReader(f)}


@pytest.mark.slow
def test_keyless_sweep_with_noise_shows_differences_between_arms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-noise")
    data = _disc_dataset(tmp_path / "data")
    with TestServer() as srv:
        plain = _sweep_summary(tmp_path / "plain", data, srv.base_url)
    with TestServer(noise=0.08, seed=0) as srv:
        noisy = _sweep_summary(tmp_path / "noisy", data, srv.base_url)
    capsys.readouterr()
    # Without noise both arms are the perfect blob counter; with it, the tool loop is better.
    assert float(plain["direct"]["em"]) == float(plain["tag"]["em"]) == 1.0
    assert float(noisy["direct"]["em"]) + 0.2 <= float(noisy["tag"]["em"])
    assert float(noisy["direct"]["mae"]) > 2 * float(noisy["tag"]["mae"])
    assert float(noisy["tag"]["duplicate_per100"]) + float(noisy["tag"]["omission_per100"]) > 0
