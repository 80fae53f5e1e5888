"""Money: every paid call stays counted across resumes, impossible usage and prices are refused
with one line, an unknown cost is reported as unknown, and no config or manifest mistake
surfaces after a call was paid. Each case replays a defect against a hostile local server."""

from __future__ import annotations

import json
import shutil
import threading
import warnings
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from countgym.cells import drop_transient_errors
from countgym.cli import main
from countgym.logs import read_records
from countgym.runner import done_episodes
from countgym.stimulus import Stimulus, write_manifest
from countgym.testing.server import model_reply

pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning")

PRICE = 1e-4  # USD per prompt token: 1000 prompt tokens = $0.10 a call


class Hostile:
    """An OpenAI-compatible server on 127.0.0.1 whose ``answer(index)`` decides each reply:
    ``("ok", usage)`` answers like a perfect blob counter with that usage, an int is an error
    status. ``paid`` counts the answered (billed) requests."""

    def __init__(self, answer: Callable[[int], Any]) -> None:
        self.answer = answer
        self.requests = 0
        self.paid = 0
        self.lock = threading.Lock()
        state = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with state.lock:
                    i = state.requests
                    state.requests += 1
                what = state.answer(i)
                if isinstance(what, int):
                    self._send(what, {"error": {"message": f"status {what}"}})
                    return
                with state.lock:
                    state.paid += 1
                text = model_reply(body["messages"])
                self._send(200, {
                    "id": f"c{i}", "object": "chat.completion", "created": 0, "model": body.get("model"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": what[1],
                })

            def _send(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hostile() -> Iterator[Callable[[Callable[[int], Any]], Hostile]]:
    servers: list[Hostile] = []

    def make(answer: Callable[[int], Any]) -> Hostile:
        servers.append(Hostile(answer))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-money")
    from countgym.agents.backends import litellm_backend

    monkeypatch.setattr(litellm_backend, "_WARNED", set())  # each test sees its own first warnings


def run_warned(args: list[str]) -> tuple[int, list[str]]:
    """``main(args)`` and the warning lines it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc = main(args)
    return rc, [str(w.message) for w in caught]


def argv(data: Path, out: Path, url: str, *extra: str, agent: str = "tag", prices: bool = True) -> list[str]:
    priced = ["--agent-option", f"input_cost_per_token={PRICE}", "--agent-option", "output_cost_per_token=0"]
    return ["run", "--data", str(data), "--agent", agent, "--model", "openai/blob", "--out", str(out),
            "--no-progress", "--agent-option", f"api_base={url}", "--agent-option", "max_attempts=1",
            *(priced if prices else []), *extra]


USAGE = {"prompt_tokens": 1000, "completion_tokens": 0}


def test_spend_cap_holds_across_resumes_of_transient_errors(tiny_dataset, tmp_path: Path, hostile, capsys) -> None:
    # Every episode's first call is answered and billed ($0.10), its second fails with a 500: a
    # transient error, re-run on resume. Today each resume forgot what those records had paid.
    srv = hostile(lambda i: ("ok", USAGE) if i % 2 == 0 else 500)
    for _ in range(5):
        _, warned = run_warned(argv(tiny_dataset.root, tmp_path, srv.url, "--max-cost", "0.35"))
        assert not [w for w in warned if "unknown" in w]  # failed calls are no calls of unknown cost
    capsys.readouterr()
    paid = srv.paid * PRICE * 1000
    # The cap is reached after the 4th paid call; never more than one episode's overshoot.
    assert paid <= 0.35 + 0.10 + 1e-9, f"paid ${paid:.2f} with a $0.35 cap"
    log = tmp_path / next(p.name for p in tmp_path.glob("*.jsonl"))
    _, recorded = done_episodes(log)
    assert recorded == pytest.approx(paid)  # every paid call is still counted
    from countgym.cells import replaced_spend, spend_ledger_of

    assert replaced_spend(log).cost > 0 and spend_ledger_of(log).is_file()
    main(argv(tiny_dataset.root, tmp_path, srv.url, "--max-cost", "0.35"))
    out = capsys.readouterr().out
    assert f"${paid:.4f} paid in all" in out and "by replaced transient-error records" in out


def test_ledger_counts_an_interrupted_removal_once(tiny_dataset, tmp_path: Path, hostile, capsys) -> None:
    srv = hostile(lambda i: ("ok", USAGE) if i % 2 == 0 else 500)
    main(argv(tiny_dataset.root, tmp_path, srv.url))
    log = next(tmp_path.glob("*.jsonl"))
    before = log.read_bytes()
    _, cost0 = done_episodes(log)
    assert cost0 == pytest.approx(0.30)
    assert drop_transient_errors([log]) == 3
    log.write_bytes(before)  # a kill after the ledger was written, before the log was replaced
    assert drop_transient_errors([log]) == 3
    _, cost1 = done_episodes(log)
    assert cost1 == pytest.approx(0.30)  # entered once, not twice
    assert read_records([log]) == []


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": -10_000_000, "completion_tokens": 0},
    {"prompt_tokens": 1000, "completion_tokens": -5},
])
def test_negative_usage_is_refused_not_a_negative_cost(tiny_dataset, tmp_path: Path, hostile, capsys, usage) -> None:
    srv = hostile(lambda i: ("ok", usage))
    rc, warned = run_warned(argv(tiny_dataset.root, tmp_path, srv.url, "--max-cost", "0.15", agent="direct"))
    captured = capsys.readouterr()
    assert rc == 0
    refused = [line for line in warned if "refused the token usage" in line]
    assert len(refused) == 1 and "\n" not in refused[0]  # one line, once
    unknown = [line for line in warned if "cost of a model call is unknown" in line]
    assert len(unknown) == 1
    assert "3 model calls of unknown cost" in captured.out
    recs = read_records([tmp_path])
    assert all(s.cost is None for r in recs for s in r.steps)  # unknown, never negative
    assert all(s.cost is None or s.cost >= 0 for r in recs for s in r.steps)


def test_usage_beyond_64_bits_keeps_the_paid_reply(tiny_dataset, tmp_path: Path, hostile, capsys) -> None:
    srv = hostile(lambda i: ("ok", {"prompt_tokens": 2**64, "completion_tokens": 3}))
    rc = main(argv(tiny_dataset.root, tmp_path, srv.url, agent="direct"))
    capsys.readouterr()
    assert rc == 0
    recs = read_records([tmp_path])
    assert sorted(r.end for r in recs) == ["answer"] * 3
    assert srv.requests == 3  # no reply discarded and paid for again
    assert all(r.steps[0].usage.prompt_tokens is None and r.steps[0].usage.completion_tokens == 3 for r in recs)


def test_unknown_cost_with_a_cap_warns_once(tiny_dataset, tmp_path: Path, hostile, capsys) -> None:
    srv = hostile(lambda i: ("ok", USAGE))
    args = argv(tiny_dataset.root, tmp_path, srv.url, "--max-cost", "1", agent="direct", prices=False)
    rc, warned = run_warned(args)
    captured = capsys.readouterr()
    assert rc == 0
    assert sum("cost of a model call is unknown" in line for line in warned) == 1
    assert "3 model calls of unknown cost" in captured.out


@pytest.mark.parametrize("option", [
    "input_cost_per_token=-0.001", "input_cost_per_token=NaN", "output_cost_per_token=Infinity",
    "output_cost_per_token=-1e-6", "timeout_s=-1", "max_attempts=0", "max_total_wait_s=NaN",
])
def test_bad_prices_and_options_are_one_line_before_any_call(tiny_dataset, tmp_path: Path, hostile, capsys, option) -> None:
    srv = hostile(lambda i: ("ok", USAGE))
    rc = main([*argv(tiny_dataset.root, tmp_path, srv.url, agent="direct"), "--agent-option", option])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "internal error" not in err[0]
    assert option.split("=")[0] in err[0]
    assert srv.requests == 0


def test_manifest_count_beyond_64_bits_is_refused_before_any_call(tmp_path: Path, tiny_dataset, hostile, capsys) -> None:
    data = tmp_path / "data"
    shutil.copytree(tiny_dataset.root / "images", data / "images")
    stims = list(tiny_dataset.stimuli)
    big = stims[-1].model_dump()
    big.update(n=2**63, points=None)
    write_manifest(data, stims[:-1])
    with (data / "manifest.jsonl").open("a") as f:
        f.write(json.dumps(big) + "\n")
    srv = hostile(lambda i: ("ok", USAGE))
    rc = main(argv(data, tmp_path / "out", srv.url, agent="direct"))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "manifest" in err[0]
    assert srv.requests == 0


def _sweep(tmp_path: Path, data: Path, url: str, bad: dict[str, Any]) -> Path:
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(json.dumps({
        "out": str(tmp_path / "runs"), "datasets": [str(data)], "arms": ["direct"],
        "models": ["openai/a", "openai/b"],
        "model_options": {"openai/a": {"api_base": url, "max_attempts": 1},
                          "openai/b": {"api_base": url, **bad}},
    }))
    return cfg


@pytest.mark.parametrize("bad", [{"max_attempts": 0}, {"timeout_s": -1}, {"input_cost_per_token": -1.0}])
def test_sweep_refuses_a_later_cells_mistake_before_paying_and_dry_run_agrees(
    tmp_path: Path, tiny_dataset, hostile, capsys, bad
) -> None:
    srv = hostile(lambda i: ("ok", USAGE))
    cfg = _sweep(tmp_path, tiny_dataset.root, srv.url, bad)
    assert main(["sweep", str(cfg), "--dry-run"]) == 2
    dry = capsys.readouterr().err.strip().splitlines()
    assert main(["sweep", str(cfg), "--no-progress"]) == 2
    run = capsys.readouterr().err.strip().splitlines()
    assert len(dry) == 1 and dry == run
    assert srv.requests == 0


def test_a_sweep_a_dry_run_accepts_runs(tmp_path: Path, tiny_dataset, hostile, capsys) -> None:
    srv = hostile(lambda i: ("ok", USAGE))
    cfg = _sweep(tmp_path, tiny_dataset.root, srv.url, {"max_attempts": 2})
    assert main(["sweep", str(cfg), "--dry-run"]) == 0
    assert main(["sweep", str(cfg), "--no-progress"]) == 0
    assert srv.requests == 6


def test_stimulus_count_is_bounded() -> None:
    with pytest.raises(ValueError):
        Stimulus(id="a", n=2**63, obj="dots", obj_sing="dot", image="a.png")
    assert Stimulus(id="a", n=2**63 - 1, obj="dots", obj_sing="dot", image="a.png").n == 2**63 - 1
