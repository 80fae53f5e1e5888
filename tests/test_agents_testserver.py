"""The local OpenAI-compatible test server: prompt recognition, usage, fault schedule, CLI."""

from __future__ import annotations

import base64
import io
import json
import urllib.error
import urllib.request

import numpy as np
import pytest
from PIL import Image, ImageDraw

from countgym.envs import templates as T

testserver = pytest.importorskip("countgym.testing.server")
TestServer = testserver.TestServer

DISCS = [(100, 100), (300, 120), (500, 400), (200, 600)]


def disc_image(centres=DISCS, size=(768, 768), r=14) -> np.ndarray:
    im = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(im)
    for x, y in centres:
        d.ellipse([x - r, y - r, x + r, y + r], fill="black")
    return np.asarray(im)


def data_url(img: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def user(text: str, img: np.ndarray | None = None) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": data_url(img)}}] if img is not None else []
    return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}


def post(url: str, body: dict) -> tuple[int, dict, dict]:
    req = urllib.request.Request(
        url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test-SECRET123"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def expected_norm(centres=DISCS, size=768) -> list[list[int]]:
    return [[round(x / size * 1000), round(y / size * 1000)] for x, y in centres]


def test_direct_cot_list_replies_count_the_discs() -> None:
    img = disc_image()
    direct = testserver.model_reply([user(T.DIRECT.format(obj="dots"), img)])
    assert direct == "ANSWER: 4"
    cot = testserver.model_reply([user(T.COT.format(obj="dots"), img)])
    assert cot.splitlines()[-1] == "ANSWER: 4" and len(cot.splitlines()) > 1
    lst = testserver.model_reply(
        [user(T.LIST.format(obj="dots", obj_sing="dot"), img)]
    ).splitlines()
    pts = json.loads(lst[0])["points"]
    assert lst[-1] == "ANSWER: 4"
    got = sorted(map(tuple, pts))
    want = sorted(map(tuple, expected_norm()))
    assert all(
        abs(a - c) <= 2 and abs(b - d) <= 2 for (a, b), (c, d) in zip(got, want, strict=True)
    )


def test_tool_loop_tags_then_answers_with_its_tag_count() -> None:
    img = disc_image()
    system = {"role": "system", "content": T.system_prompt("dots", "dot", ("tag",), 6)}
    first = [system, user(T.first_user_message("dots", "dot"), img)]
    reply = testserver.model_reply(first)
    action = json.loads(reply.splitlines()[-1])
    assert action["tool"] == "tag" and len(action["points"]) == 4
    verify = T.VERIFY.format(a=1, b=4, obj_sing="dot", obj="dots", left=5)
    second = [*first, {"role": "assistant", "content": reply}, user(verify, img)]
    assert json.loads(testserver.model_reply(second).splitlines()[-1]) == {
        "tool": "answer",
        "count": 4,
    }
    exhausted = [*first, {"role": "assistant", "content": reply}, user(T.BUDGET_EXHAUSTED.format())]
    assert json.loads(testserver.model_reply(exhausted)) == {"tool": "answer", "count": 4}


def test_tag1_mode_tags_one_point_per_turn_from_its_plan() -> None:
    img = disc_image()
    conv = [
        {"role": "system", "content": T.system_prompt("dots", "dot", ("tag",), 80)},
        user(T.first_user_message("dots", "dot", one_point_per_call=True), img),
    ]
    tagged = []
    for k in range(6):
        reply = testserver.model_reply(conv)
        action = json.loads(reply.splitlines()[-1])
        if action["tool"] == "answer":
            break
        assert len(action["points"]) == 1
        tagged.append(tuple(action["points"][0]))
        conv += [
            {"role": "assistant", "content": reply},
            user(T.VERIFY.format(a=k + 1, b=k + 1, obj_sing="dot", obj="dots", left=79 - k)),
        ]
    assert action == {"tool": "answer", "count": 4}
    assert len(set(tagged)) == 4


def test_tile_reply_uses_the_crop_frame() -> None:
    img = disc_image([(50, 50)], size=(100, 100), r=8)
    reply = testserver.model_reply([user(T.TILE.format(obj="dots", obj_sing="dot"), img)])
    lines = reply.splitlines()
    assert json.loads(lines[1]) == {"points": [[500, 500]]}
    assert lines[-1] == "ANSWER: 1"


def test_red_objects_are_counted_by_colour() -> None:
    im = Image.new("RGB", (200, 200), "white")
    d = ImageDraw.Draw(im)
    d.ellipse([10, 10, 40, 40], fill=(220, 20, 20))
    d.ellipse([100, 100, 130, 130], fill=(20, 20, 220))
    assert (
        testserver.model_reply([user(T.DIRECT.format(obj="red discs"), np.asarray(im))])
        == "ANSWER: 1"
    )


def test_http_body_usage_and_429_retry_after_header() -> None:
    img = disc_image()
    body = {"model": "blob", "messages": [user(T.DIRECT.format(obj="dots"), img)]}
    with TestServer(schedule=["429", "ok"], retry_after=2, reasoning_tokens=7) as srv:
        status, headers, err = post(srv.base_url, body)
        assert status == 429 and headers["Retry-After"] == "2"
        assert err["error"]["type"] == "rate_limit_error"
        status, _, ok = post(srv.base_url, body)
    assert status == 200
    assert ok["choices"][0]["message"]["content"] == "ANSWER: 4"
    assert ok["model"] == "blob" and ok["id"].startswith("chatcmpl-")
    usage = ok["usage"]
    # 768 px -> 2 x 2 tiles of 512: 85 + 170 * 4 image tokens, plus the text.
    assert usage["prompt_tokens"] > 85 + 170 * 4
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 7
    assert usage["completion_tokens"] >= 7 + 1
    assert srv.fault_counts["429"] == 1 and srv.request_count == 2


def test_fault_draws_are_deterministic_per_request_index() -> None:
    a = TestServer(faults={"429": 0.3, "500": 0.2}, seed=5)
    b = TestServer(faults={"429": 0.3, "500": 0.2}, seed=5)
    fa = [a.next_fault()[1] for _ in range(200)]
    fb = [b.next_fault()[1] for _ in range(200)]
    assert fa == fb
    assert 30 < fa.count("429") < 90 and 15 < fa.count("500") < 70
    with pytest.raises(ValueError, match="unknown fault"):
        TestServer(faults={"418": 0.1})


def test_cli_rejects_bad_faults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        testserver.main(["--faults", "429"])
    assert e.value.code == 2
    assert testserver.main(["--faults", "teapot=0.5"]) == 2
    assert "unknown fault" in capsys.readouterr().err


def test_image_analysis_is_cached_by_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    # Clients re-send the same views: the server decodes and searches each payload once.
    # Only this thread's detections count: a server thread left by an earlier test (a request
    # that outlived its client's deadline) may still finish and detect in the background.
    import threading

    me = threading.current_thread()
    calls: list[str] = []
    real = testserver.detect_blobs

    def counted(img, **kw):  # noqa: ANN001, ANN202
        if threading.current_thread() is me:
            calls.append("x")
        return real(img, **kw)

    monkeypatch.setattr(testserver, "detect_blobs", counted)
    testserver._blobs_of.cache_clear()
    img = disc_image()
    msgs = [user(T.DIRECT.format(obj="dots"), img)]
    assert [testserver.model_reply(msgs) for _ in range(3)] == ["ANSWER: 4"] * 3
    assert len(calls) == 1
    # Another image (the same text) is analysed afresh: the key is the payload itself.
    other = [user(T.DIRECT.format(obj="dots"), disc_image(DISCS[:2]))]
    assert testserver.model_reply(other) == "ANSWER: 2" and len(calls) == 2
    # A caller that changes the points it got back does not change the cached answer.
    pts, _ = testserver._normalised_blobs(msgs[0]["content"][0]["image_url"]["url"], "dark")
    pts[0][0] = -1
    again, _ = testserver._normalised_blobs(msgs[0]["content"][0]["image_url"]["url"], "dark")
    assert again[0][0] != -1 and len(calls) == 2


def test_the_server_is_ready_for_images_when_it_says_it_is_listening() -> None:
    """The blob detector's imports happen at start, not in the first requests (which waited
    for them past their latency)."""
    import subprocess
    import sys

    code = ("import sys; from countgym.testing.server import TestServer; s = TestServer().start(); "
            "print('scipy.ndimage' in sys.modules); s.stop()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("target", ["dark", "red", "any"])
def test_the_foreground_mask_is_the_widened_comparison(target: str) -> None:
    """Compared in uint8, the mask is what the comparison in wider integers gives (no wrap)."""
    import numpy as np

    from countgym.agents.blobs import foreground_mask

    img = np.random.default_rng(3).integers(0, 256, (64, 80, 3), dtype=np.uint8)
    img[0, 0] = (255, 0, 0)  # the widest spread
    w = img.astype(np.int32)
    r, g, b = w[..., 0], w[..., 1], w[..., 2]
    expect = {"dark": (r < 96) & (g < 96) & (b < 96), "red": (r > 150) & (g < 90) & (b < 90),
              "any": (w.max(-1) < 110) | (w.max(-1) - w.min(-1) > 80)}[target]
    assert np.array_equal(foreground_mask(img, target=target), expect)


@pytest.mark.parametrize("fmt,size", [("PNG", (37, 21)), ("PNG", (1, 4000)), ("JPEG", (640, 480)), ("GIF", (3, 2))])
def test_the_usage_estimate_reads_image_sizes_from_their_headers(fmt: str, size: tuple[int, int]) -> None:
    import base64
    import io

    from PIL import Image

    from countgym.testing.server import image_size

    buf = io.BytesIO()
    Image.new("RGB", size).save(buf, format=fmt)
    assert image_size(f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()) == size


def _post_headers(srv, messages: list[dict]) -> tuple[dict, str]:
    req = urllib.request.Request(
        srv.base_url + "/chat/completions",
        data=json.dumps({"model": "blob", "messages": messages}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        body = json.loads(r.read())
        return dict(r.headers), body["choices"][0]["message"]["content"]


def test_blind_tasks_are_announced_once_with_a_header(capsys) -> None:
    """CounterCount and video prompts: the server cannot see their truth and says so (one stderr
    line per task, a header on every such reply); image prompts carry no such header."""
    from countgym.envs.cf_env import build_question
    from countgym.envs.video_templates import PROMPTS
    from countgym.stimulus import Stimulus

    stim = Stimulus(id="dog-4", n=4, obj="legs", obj_sing="leg", image="x.png",
                    meta={"subject": "dog", "attribute": "legs", "canonical_count": 4, "cf_count": 5, "kind": "cf"})
    cf = build_question(stim, format="mcq").text
    video = PROMPTS["P1"].format(color="red", shape="cube")
    img = disc_image()
    with TestServer() as srv:
        for _ in range(3):
            headers, _ = _post_headers(srv, [user(cf, img)])
            assert "countercount" in headers["X-Countgym-Blind"] and "--simulate" in headers["X-Countgym-Blind"]
        headers, _ = _post_headers(srv, [user(video, img)])
        assert headers["X-Countgym-Blind"].startswith("video")
        headers, _ = _post_headers(srv, [user(T.DIRECT.format(obj="dots"), img)])
        assert "X-Countgym-Blind" not in headers
    err = capsys.readouterr().err
    assert err.count("countgym testserver: CounterCount prompts") == 1
    assert err.count("countgym testserver: CountVideoBench prompts") == 1
    assert len(err.strip().splitlines()) == 2
