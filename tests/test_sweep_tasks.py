"""One sweep, three tasks: a plug-in policy, a scripted policy and model arms (against the local
test server) on DotArrays, CounterCount and CountVideoBench cells of ONE sweep config, resumed
after a SIGKILL to exactly the clean set, and audited into one report covering all three."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from countgym.cli import main
from countgym.logs import read_records
from countgym.sweep import expand, load_config
from countgym.testing.server import TestServer

PLUGINS = str(Path(__file__).parent / "plugins")
PLUGIN = "any_task_policy:AnswerSeven"


def _config(path: Path, out: Path, image: Path, cc: Path, cv: Path, api_base: str, delay: float) -> Path:
    path.write_text(f'''
out = "{out}"
envs = [
  {{ id = "countgym/DotArrays-v0", dataset = "{image}" }},
  {{ id = "countgym/CounterCount-v0", dataset = "{cc}" }},
  "countgym/CountVideo-v0",
]
datasets = []
arms = ["{PLUGIN}", "blob-counter", "tag", "cf-mcq", "video-p1"]
models = ["openai/blob"]
concurrency = 2
[agent_options."{PLUGIN}"]
delay = {delay}
[model_options."openai/blob"]
api_base = "{api_base}"
'''.replace('"countgym/CountVideo-v0",', f'{{ id = "countgym/CountVideo-v0", dataset = "{cv}" }},'))
    return path


@pytest.fixture()
def server(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-three-tasks")
    monkeypatch.syspath_prepend(PLUGINS)
    with TestServer() as srv:
        yield srv


def _ids(out: Path) -> Counter:
    return Counter(r.episode_id for r in read_records([out]))


@pytest.mark.slow
def test_one_sweep_three_tasks_resumes_after_kill_and_audits_into_one_report(
    server, tiny_dataset, tiny_countercount: Path, tiny_countvideo: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "runs"
    cfg_path = _config(tmp_path / "sweep.toml", out, tiny_dataset.root, tiny_countercount, tiny_countvideo,
                       server.base_url, delay=0.4)
    cells = expand(load_config(cfg_path))
    by_task = Counter((c.agent, c.task()) for c in cells)
    assert by_task == Counter({
        (PLUGIN, "image"): 1, (PLUGIN, "countercount"): 1, (PLUGIN, "video"): 1,
        ("blob-counter", "image"): 1, ("tag", "image"): 1, ("cf-mcq", "countercount"): 1, ("video-p1", "video"): 1,
    })
    assert main(["sweep", str(cfg_path), "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert shown.count("skipped:") == 3 * 5 - 7 and "blob-counter on countgym/CounterCount-v0" in shown

    # Kill the sweep mid-run (the plug-in sleeps, so the first cell is still running).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([PLUGINS, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "countgym", "sweep", str(cfg_path), "--no-progress"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if sum(len(p.read_bytes().splitlines()) for p in out.glob("*.jsonl")) >= 1:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    partial = _ids(out)
    assert 1 <= sum(partial.values()) < 21

    # Resume with the same config (the same cells: the delay is part of the plug-in cell).
    assert main(["sweep", str(cfg_path), "--no-progress"]) == 0
    ids = _ids(out)
    image, cc, cv = 3, 4, 2
    assert sum(ids.values()) == 3 * image + 2 * cc + 2 * cv == 21
    assert max(ids.values()) == 1  # nothing duplicated by the resume
    recs = read_records([out])
    assert {(r.arm.name, r.env) for r in recs} == {
        (PLUGIN, "countgym/DotArrays-v0"), (PLUGIN, "countgym/CounterCount-v0"), (PLUGIN, "countgym/CountVideo-v0"),
        ("blob-counter", "countgym/DotArrays-v0"), ("tag", "countgym/DotArrays-v0"),
        ("cf-mcq", "countgym/CounterCount-v0"), ("video-p1", "countgym/CountVideo-v0"),
    }
    assert all(r.end != "error" for r in recs), [r.error for r in recs if r.error]

    audit = tmp_path / "audit"
    assert main(["audit", str(out), "--out", str(audit), "--resamples", "50"]) == 0
    html = (audit / "report.html").read_text()
    for section in ('id="summary"', 'id="countercount"', 'id="countvideo"'):
        assert section in html
    with open(audit / "episodes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    plugin_rows = [row for row in rows if row["arm"] == PLUGIN]
    assert len(plugin_rows) == image + cc + cv and {row["answer"] for row in plugin_rows} == {"7"}
    assert {row["arm"] for row in rows} == {PLUGIN, "blob-counter", "tag", "cf-mcq", "video-p1"}
