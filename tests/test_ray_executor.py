"""The Ray executor on a local Ray instance: same episodes as the local executor, shard logs read as
one run, resume across executors and after a SIGKILLed driver, the sweep-wide spend cap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from countgym.executors import cell_log_files, done_in_cell, shard_dir
from countgym.logs import read_records
from countgym.sweep import SweepConfig, expand, run_sweep

ray = pytest.importorskip("ray")

from countgym.executors.ray_executor import run_sweep_ray  # noqa: E402

pytestmark = pytest.mark.slow  # each test starts a local Ray instance

PLUGINS = str(Path(__file__).parent / "plugins")
NOISY = {"sigma": 8.0, "omission": 0.2, "duplicate": 0.2, "phantom": 0.2, "slip": 0.3}


@pytest.fixture(scope="module")
def local_ray() -> object:
    """One small local Ray instance for the module; workers inherit PYTHONPATH (plug-ins)."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = PLUGINS + (os.pathsep + old if old else "")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture(autouse=True)
def _plugins_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(PLUGINS)


def _cfg(tiny_dataset, out: Path, **kw) -> SweepConfig:
    base = {
        "out": str(out),
        "datasets": [str(tiny_dataset.root)],
        "arms": ["noisy-pointer", "blob-counter"],
        "agent_options": {"noisy-pointer": NOISY},
        "repeats": 3,
    }
    return SweepConfig.model_validate({**base, **kw})


def _episodes(out: Path) -> list[tuple]:
    recs = read_records([out])
    return sorted((r.episode_id, r.stimulus_id, r.repeat, r.answer, tuple(r.tags)) for r in recs)


def test_ray_gives_the_local_executors_episodes(local_ray, tiny_dataset, tmp_path: Path) -> None:
    local = run_sweep(_cfg(tiny_dataset, tmp_path / "local"), progress=False)
    res = run_sweep_ray(_cfg(tiny_dataset, tmp_path / "ray"), progress=False, shard_size=2)
    want = _episodes(tmp_path / "local")
    assert len(want) == 2 * 3 * 3 and [r.ran for r in local] == [9, 9]
    assert _episodes(tmp_path / "ray") == want
    assert [r.ran for r in res] == [9, 9] and not any(r.errors for r in res)
    # The noisy pointer really is random per episode, so equality is not a coincidence.
    assert len({e[3:] for e in want}) > 6
    for spec in expand(_cfg(tiny_dataset, tmp_path / "ray")):
        files = cell_log_files(tmp_path / "ray", spec)
        assert len(files) == 5 and all(f.parent == shard_dir(tmp_path / "ray", spec) for f in files)


def test_audit_reads_shards_and_main_log_as_one_run(local_ray, tiny_dataset, tmp_path: Path) -> None:
    from countgym.analysis.pipeline import compute_tables

    cfg = _cfg(tiny_dataset, tmp_path / "mixed", arms=["noisy-pointer"])
    # Half the episodes by the local executor into the main log, the rest by Ray into shards.
    run_sweep(cfg.model_copy(update={"limit": 2}), progress=False)
    res = run_sweep_ray(cfg, progress=False, shard_size=1)
    assert res[0].skipped == 6 and res[0].ran == 3
    run_sweep(_cfg(tiny_dataset, tmp_path / "local", arms=["noisy-pointer"]), progress=False)
    assert _episodes(tmp_path / "mixed") == _episodes(tmp_path / "local")
    mixed = compute_tables(read_records([tmp_path / "mixed"]))
    clean = compute_tables(read_records([tmp_path / "local"]))
    assert len(mixed.episodes) == 9
    cols = ["episode_id", "answer", "n_tags", "on_target", "duplicate", "phantom"]
    a = mixed.episodes[cols].sort_values("episode_id").reset_index(drop=True)
    b = clean.episodes[cols].sort_values("episode_id").reset_index(drop=True)
    assert a.equals(b)
    assert len(mixed.summary) == len(clean.summary) >= 1


def test_resume_skips_episodes_of_every_cell_file(local_ray, tiny_dataset, tmp_path: Path) -> None:
    cfg = _cfg(tiny_dataset, tmp_path / "run", arms=["noisy-pointer"])
    first = run_sweep_ray(cfg.model_copy(update={"repeats": 1}), progress=False, shard_size=1)
    assert first[0].ran == 3
    again = run_sweep_ray(cfg, progress=False, shard_size=4)
    assert again[0].ran == 6 and again[0].skipped == 3
    assert run_sweep_ray(cfg, progress=False)[0].ran == 0
    recs = read_records([tmp_path / "run"])
    assert len(recs) == 9 == len({(r.stimulus_id, r.repeat) for r in recs})
    (spec,) = expand(cfg)
    done, cost = done_in_cell(tmp_path / "run", spec)
    assert len(done) == 9 and cost == 0.0
    forced = run_sweep_ray(cfg, progress=False, force=True)
    assert forced[0].ran == 9 and len(read_records([tmp_path / "run"])) == 9


def test_local_executor_resumes_a_ray_run_without_duplicates(local_ray, tiny_dataset, tmp_path: Path) -> None:
    cfg = _cfg(tiny_dataset, tmp_path / "run", arms=["noisy-pointer"])
    run_sweep_ray(cfg.model_copy(update={"repeats": 1}), progress=False)
    local = run_sweep(cfg, progress=False)
    assert local[0].ran == 6 and local[0].skipped == 3
    run_sweep(_cfg(tiny_dataset, tmp_path / "clean", arms=["noisy-pointer"]), progress=False)
    assert _episodes(tmp_path / "run") == _episodes(tmp_path / "clean")


def test_sigkilled_driver_then_rerun_gives_the_clean_set(local_ray, tiny_dataset, tmp_path: Path) -> None:
    cfg = _cfg(tiny_dataset, tmp_path / "killed", arms=["noisy-pointer"], repeats=40)
    total = 3 * 40
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(f"""
        from countgym.sweep import SweepConfig
        from countgym.executors.ray_executor import run_sweep_ray
        cfg = SweepConfig.model_validate_json({cfg.model_dump_json()!r})
        run_sweep_ray(cfg, progress=False, num_cpus=2, shard_size=3)
    """))
    env = {**os.environ, "RAY_ADDRESS": ""}
    # Own session: the driver's leftover Ray helpers can be cleaned up by process group below.
    proc = subprocess.Popen([sys.executable, str(script)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    shards = tmp_path / "killed"
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if sum(len(p.read_bytes().splitlines()) for p in shards.rglob("*.jsonl")) >= 10:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        proc.send_signal(signal.SIGKILL)  # the driver only, mid-run
        proc.wait(30)
        time.sleep(1.0)  # tasks that were mid-episode may finish it; none may start another
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of that Ray instance (same group)
        except ProcessLookupError:
            pass
    partial = read_records([shards])
    assert 10 <= len(partial) < total
    res = run_sweep_ray(cfg, progress=False)
    assert res[0].ran == total - len(partial)
    run_sweep(cfg.model_copy(update={"out": str(tmp_path / "clean")}), progress=False)
    assert _episodes(shards) == _episodes(tmp_path / "clean")
    assert len(_episodes(shards)) == total


def test_spend_cap_stops_launching_shards(local_ray, tiny_dataset, tmp_path: Path) -> None:
    # Costly: $0.10 per episode; 30 episodes would cost $3.00.
    cfg = _cfg(tiny_dataset, tmp_path / "capped", arms=["outside_policy:Costly"], repeats=10, max_cost=0.55)
    (res,) = run_sweep_ray(cfg, progress=False, shard_size=2)
    recs = read_records([tmp_path / "capped"])
    cost = sum(s.cost or 0 for r in recs for s in r.steps)
    assert res.stopped_by_cost and res.ran == len(recs) < 30
    # At the cap nothing new starts; overshoot is bounded by the 2 shards in flight (2 x $0.20).
    assert 0.55 <= cost <= 0.55 + 0.40 + 1e-9
    assert res.cost == pytest.approx(cost)
    more = run_sweep_ray(cfg.model_copy(update={"max_cost": None}), progress=False)
    assert more[0].ran == 30 - len(recs) and len(read_records([tmp_path / "capped"])) == 30


def test_vllm_endpoint_sweep_on_ray_matches_local(local_ray, tiny_dataset, tmp_path: Path) -> None:
    """Local models at scale: Ray tasks talk to one OpenAI-compatible (vLLM-like) endpoint."""
    pytest.importorskip("litellm")
    from countgym.testing.server import TestServer

    model = "hosted_vllm/Qwen/Qwen2.5-VL-7B-Instruct"
    with TestServer() as srv:
        cfg = _cfg(tiny_dataset, tmp_path / "ray", arms=["direct", "tag"], models=[model], repeats=2,
                   concurrency=3, model_options={model: {"api_base": srv.base_url}})
        # One shard per cell, 3 threads in it: each Ray worker imports litellm only once.
        res = run_sweep_ray(cfg, progress=False, shard_size=6)
        run_sweep(cfg.model_copy(update={"out": str(tmp_path / "local")}), progress=False)
    assert [r.ran for r in res] == [6, 6] and not any(r.errors for r in res)
    assert _episodes(tmp_path / "ray") == _episodes(tmp_path / "local")
    recs = read_records([tmp_path / "ray"])
    assert all(r.answer == r.truth.n for r in recs) and {r.model for r in recs} == {model}


def test_ray_shards_redact_credentials_like_the_local_runner(tiny_dataset) -> None:
    """Both executors build records through runner.run_one: a key given as an option is redacted."""
    from countgym.agents.registry import policy_factory
    from countgym.runner import CellSpec, run_one

    spec = CellSpec(dataset=str(tiny_dataset.root), agent="oracle", agent_options={"api_key": "sk-x"})
    rec = run_one(spec, tiny_dataset, policy_factory("oracle"), "cell", "four", 0)
    assert rec.end == "answer" and rec.episode_id == "cell/four/r0"
    assert rec.arm.options["api_key"] == "<redacted>" and "sk-x" not in rec.model_dump_json()


def test_plugin_on_single_step_tasks_through_ray(
    local_ray, tiny_countercount: Path, tiny_countvideo: Path, tmp_path: Path
) -> None:
    """A plug-in written outside the package, on CounterCount and CountVideo environments of one
    sweep, through `countgym sweep --executor ray`: its own answers reach the log and the audit."""
    from countgym.cli import main

    out = tmp_path / "runs"
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'''
out = "{out}"
envs = [{{ id = "countgym/CounterCount-v0", dataset = "{tiny_countercount}" }},
        {{ id = "countgym/CountVideo-v0", dataset = "{tiny_countvideo}" }}]
arms = ["any_task_policy:AnswerSeven"]
''')
    assert main(["sweep", str(cfg), "--executor", "ray", "--no-progress"]) == 0
    recs = read_records([out])
    assert len(recs) == 4 + 2 and {r.answer for r in recs} == {7}
    assert {r.env for r in recs} == {"countgym/CounterCount-v0", "countgym/CountVideo-v0"}
    assert all(p.parent.name.endswith(".shards") for p in out.rglob("*.jsonl"))
    assert main(["audit", str(out), "--out", str(tmp_path / "audit"), "--resamples", "50"]) == 0
    html = (tmp_path / "audit" / "report.html").read_text()
    assert 'id="countercount"' in html and 'id="countvideo"' in html


def test_ray_driver_holds_each_cells_lock_and_skips_a_busy_cell(local_ray, tiny_dataset, tmp_path: Path, capsys) -> None:
    from countgym.celllock import CellBusyError, cell_lock

    cfg = _cfg(tiny_dataset, tmp_path / "ray", repeats=1)
    busy, free = expand(cfg)
    with cell_lock(tmp_path / "ray" / busy.log_name()):
        res = run_sweep_ray(cfg, progress=False)
    assert [r.ran for r in res] == [0, 3]
    assert "skipped: cell" in capsys.readouterr().out
    assert cell_log_files(tmp_path / "ray", busy) == []  # no shard of the busy cell ran
    assert len(cell_log_files(tmp_path / "ray", free)) >= 1  # shards keep their own files
    # The driver released every lock when it finished.
    with cell_lock(tmp_path / "ray" / free.log_name()):
        pass
    with pytest.raises(CellBusyError), cell_lock(tmp_path / "ray" / free.log_name()), cell_lock(tmp_path / "ray" / free.log_name()):
        pass
