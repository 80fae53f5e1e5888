"""Deadlines, not read timeouts: a server that sends headers and then one byte every 2 s never
trips a per-read timeout, so every network call must end at its total deadline instead (per
attempt, per episode, per downloaded image)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("litellm")

from countgym.agents.backends.base import message, text_part  # noqa: E402
from countgym.agents.backends.litellm_backend import LiteLLMBackend  # noqa: E402
from countgym.cli import main  # noqa: E402
from countgym.deadlines import episode_scope  # noqa: E402
from countgym.errors import is_transient_error  # noqa: E402
from countgym.logs import read_records  # noqa: E402
from countgym.scenes.photos.download import download_images  # noqa: E402
from countgym.testing.server import TestServer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")
TRICKLE_S = 2.0  # one byte every 2 s: every read returns within the 3 s timeouts below


def finishes_within(seconds: float, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it is still running."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            out["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s: the deadline did not fire"
    if "error" in out:
        raise out["error"]
    return out["value"]


class _NoSleep(list):
    def __call__(self, s: float) -> None:
        self.append(s)


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["direct", "litellm"])
def test_trickling_reply_ends_each_attempt_at_its_deadline(monkeypatch: pytest.MonkeyPatch, transport: str) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-deadline")
    with TestServer(faults={"trickle": 1.0}, trickle_interval_s=TRICKLE_S) as srv:
        be = LiteLLMBackend("openai/blob", api_base=srv.base_url, timeout_s=3, max_attempts=2,
                            sleep=_NoSleep(), seed=0, transport=transport)
        t0 = time.monotonic()
        r = finishes_within(30, lambda: be.complete([message("user", text_part("How many? ANSWER: n"))]))
        elapsed = time.monotonic() - t0
        assert srv.request_count == 2
    assert r.text == "" and r.error is not None and is_transient_error(r.error)
    assert "within 3.0 s" in r.error and "deadline" in r.error
    assert 6.0 <= elapsed < 15.0  # two attempts of 3 s, plus the cancellation (on a busy machine)


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["direct", "litellm"])
def test_episode_deadline_bounds_all_calls_of_an_episode(monkeypatch: pytest.MonkeyPatch, transport: str) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-deadline")
    with TestServer(faults={"trickle": 1.0}, trickle_interval_s=TRICKLE_S) as srv:
        # Per attempt 3 s, 50 attempts: 150 s per call, but the episode has only 4 s.
        be = LiteLLMBackend("openai/blob", api_base=srv.base_url, timeout_s=3, max_attempts=50,
                            backoff_base_s=0.01, episode_timeout_s=4, seed=0, transport=transport)

        def episode() -> list[Any]:
            with episode_scope():
                msgs = [message("user", text_part("How many? ANSWER: n"))]
                return [be.complete(msgs), be.complete(msgs), be.complete_batch([msgs, msgs])]

        t0 = time.monotonic()
        first, second, batch = finishes_within(30, episode)
        elapsed = time.monotonic() - t0
    assert 3.9 <= elapsed < 12.0
    for r in (first, second, *batch):
        assert r.error is not None and is_transient_error(r.error)
    assert "episode deadline" in second.error and all("episode deadline" in r.error for r in batch)


@pytest.mark.slow
def test_run_against_a_trickling_server_ends_every_episode(tiny_dataset, tmp_path: Path, capsys,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-deadline")
    with TestServer(faults={"trickle": 1.0}, trickle_interval_s=TRICKLE_S) as srv:
        argv = ["run", "--data", str(tiny_dataset.root), "--agent", "tag", "--model", "openai/blob",
                "--out", str(tmp_path), "--no-progress", "--concurrency", "3",
                "--agent-option", f"api_base={srv.base_url}", "--agent-option", "timeout_s=3",
                "--agent-option", "episode_timeout_s=4", "--agent-option", "backoff_base_s=0.01"]
        t0 = time.monotonic()
        rc = finishes_within(60, lambda: main(argv))
        elapsed = time.monotonic() - t0
    assert rc == 1 and elapsed < 20  # every episode failed: exit 1, one line
    out, err = capsys.readouterr()
    assert "3 episodes run" in out and "all 3 episodes ended in error" in err
    recs = read_records([tmp_path])
    assert len(recs) == 3 and all(r.end == "error" and is_transient_error(r.error) for r in recs)


# --- the downloader ---------------------------------------------------------------------------------


@pytest.fixture
def trickle_site() -> Iterator[dict[str, str]]:
    """Raw HTTP on 127.0.0.1: /body sends headers then a byte every 2 s; /head trickles the
    status line itself."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        try:
            request = conn.recv(65536)
            body = b"\x89PNG" + b"x" * 200
            head = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n" % len(body)
            slow = body if b"/body" in request else head + body
            if b"/body" in request:
                conn.sendall(head)
            for i in range(len(slow)):
                if stop.is_set():
                    return
                conn.sendall(slow[i : i + 1])
                time.sleep(TRICKLE_S)
        except OSError:
            pass  # the client hung up: what the deadline is for
        finally:
            conn.close()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    base = f"http://127.0.0.1:{srv.getsockname()[1]}"
    try:
        yield {"body": f"{base}/body.png", "head": f"{base}/head.png"}
    finally:
        stop.set()
        srv.close()


@pytest.mark.slow
@pytest.mark.parametrize("where", ["body", "head"])
def test_download_ends_a_trickling_transfer_at_its_deadline(trickle_site, where: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    url = trickle_site[where]
    t0 = time.monotonic()
    rep = finishes_within(30, lambda: download_images([(url, None)], tmp_path, retries=1, timeout=3,
                                                      backoff_s=0.01, progress=False))
    elapsed = time.monotonic() - t0
    assert rep.downloaded == 0 and not rep.dead
    assert [u for u, _ in rep.failed] == [url]
    assert "deadline" in rep.failed[0][1] and "after 2 attempts" in rep.failed[0][1]
    assert 6.0 <= elapsed < 15.0  # two attempts of 3 s (on a busy machine)
    assert not list(tmp_path.iterdir())  # nothing half-written
