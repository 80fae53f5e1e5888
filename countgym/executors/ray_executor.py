"""Run a sweep on Ray (``countgym sweep CONFIG --executor ray``), resumable and spend-capped.

Each cell's pending episodes (the local runner's ``(stimulus_id, repeat)`` enumeration, seeds
from ``episode_seed``) are cut into shards; each shard is one Ray task that runs its episodes
with the same code as the local runner and appends them to its OWN log file,
``<out>/<cell-stem>.shards/<run-id>-<k>.jsonl``. No two writers ever share a file, so appends
need no coordination across processes or machines; the audit reads the shard logs and the main
cell log as one run (they hold distinct episodes). Resume reads every file of a cell
(``countgym.cells.done_in_cell``) and skips what any of them holds.

Spend cap: the driver adds up the cost recorded by finished shards and stops launching shards
once the sweep's total reaches ``max_cost``; a shard also stops starting episodes once its own
cost reaches what was left of the cap when it was launched. Overshoot is therefore bounded by
the shards in flight (at most one slot's worth each), as the local runner's is by its threads.

Local machine: ``ray.init(num_cpus=...)`` is started (and shut down) for you. Cluster: set
``RAY_ADDRESS`` (or pass ``address``); ``out`` must then be on a filesystem every node shares
and countgym (plus any plug-in policy module) must be importable on the workers
(``runtime_env``).
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from countgym.celllock import CellBusyError, cell_lock
from countgym.cells import (
    CellSpec,
    cell_log_files,
    clear_cell,
    done_in_cell,
    done_in_files,
    drop_transient_errors,
    shard_dir,
    step_spend,
)
from countgym.errors import MissingExtraError, UserError
from countgym.logs import EpisodeRecord, LogWriter
from countgym.runner import CellResult, run_one, run_pairs, write_cell_header
from countgym.sweep import SweepConfig, expand, validate_cells

MAX_AUTO_SHARD = 50
"""Largest automatic shard: small enough that a killed run loses little and progress moves."""


def import_ray() -> Any:
    """``import ray``, or ``MissingExtraError`` naming the ``ray`` extra."""
    try:
        import ray
    except ImportError:
        raise MissingExtraError("ray", "ray") from None
    return ray


def ensure_ray(
    *, address: str | None = None, num_cpus: int | None = None, runtime_env: dict[str, Any] | None = None
) -> bool:
    """Connect to ``address`` / ``RAY_ADDRESS``, or start a local instance; True if this call
    initialised Ray (the caller then shuts it down). An already initialised Ray is reused."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, runtime_env=runtime_env)
    else:
        # "local": never attach silently to a stale cluster found in /tmp/ray; use
        # RAY_ADDRESS=auto to join one started with `ray start`.
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, runtime_env=runtime_env)
    return True


@dataclass
class _Shard:
    cell: int
    path: Path
    pairs: list[tuple[str, int]]


@dataclass
class _Plan:
    spec: CellSpec
    result: CellResult
    shards: list[_Shard] = field(default_factory=list)


def run_sweep_ray(
    cfg: SweepConfig,
    *,
    progress: bool = True,
    force: bool = False,
    shard_size: int | None = None,
    address: str | None = None,
    num_cpus: int | None = None,
    max_in_flight: int | None = None,
    task_options: dict[str, Any] | None = None,
    runtime_env: dict[str, Any] | None = None,
    retry_errors: bool = True,
) -> list[CellResult]:
    """Run every cell of a sweep as Ray tasks (resuming), honouring the sweep-wide spend cap.

    Args:
        cfg: the sweep (``countgym.sweep.SweepConfig``).
        progress: show a progress bar (episodes/s, cost, errors).
        force: delete every log of every cell first (main and shard logs).
        shard_size: episodes per Ray task; None picks ``ceil(pending / (2 x slots))``, at most 50.
        address: Ray address; default ``RAY_ADDRESS``, else a new local instance.
        num_cpus: CPUs of a new local instance (ignored when connecting to a cluster).
        max_in_flight: shards submitted at once; default the cluster's slots for these tasks
            (twice that when there is no spend cap).
        task_options: ``ray.remote`` options of the shard tasks, e.g. ``{"num_cpus": 0.25}``
            for API-bound episodes or ``{"num_gpus": 1}`` for local models.
        runtime_env: Ray runtime environment (cluster: ``{"py_modules": [...]}`` or
            ``{"working_dir": ...}`` for plug-in policies).
        retry_errors: re-run episodes whose record is a transient error (the default).

    Returns one ``CellResult`` per cell, in ``expand(cfg)`` order, with ``log`` the main log
    path (shard logs sit beside it in ``<cell-stem>.shards/``).
    """
    if shard_size is not None and shard_size < 1:
        raise UserError(f"shard_size must be >= 1, got {shard_size}")
    if max_in_flight is not None and max_in_flight < 1:
        raise UserError(f"max_in_flight must be >= 1, got {max_in_flight}")
    ray = import_ray()
    out = Path(cfg.out)
    notes: list[str] = []
    cells = expand(cfg, notes=notes)
    for line in notes:
        print(line)
    validate_cells(cfg, cells)  # every cell's mistakes, before any shard pays for a call
    started = ensure_ray(address=address, num_cpus=num_cpus, runtime_env=runtime_env)
    locks = ExitStack()  # the driver holds every cell's lock; shard tasks write their own files
    try:
        opts = {"max_retries": 2, **(task_options or {})}
        per_task = float(opts.get("num_cpus", 1) or 0)
        cpus = float(ray.cluster_resources().get("CPU", 1))
        slots = max(1, int(cpus // per_task)) if per_task > 0 else max(1, int(cpus))
        in_flight = max_in_flight or (slots if cfg.max_cost is not None else 2 * slots)
        run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        plans = [
            _plan_cell(i, spec, out, run_id, force, shard_size, slots, retry_errors)
            if _lock_cell(locks, out, spec, f"[{i + 1}/{len(cells)}]")
            else _Plan(spec, CellResult(log=out / spec.log_name()), [])
            for i, spec in enumerate(cells)
        ]
        remote = ray.remote(_run_shard).options(**opts)
        if progress:
            n_ep = sum(len(s.pairs) for p in plans for s in p.shards)
            n_sh = sum(len(p.shards) for p in plans)
            print(f"ray: {len(plans)} cells, {n_ep} episodes to run in {n_sh} shards ({slots} slots)")
        _drive(ray, remote, plans, cfg, out, in_flight, progress)
        for p in plans:
            _note_selection(out, p)
    finally:
        locks.close()
        if started:
            ray.shutdown()
    return [p.result for p in plans]


def _note_selection(out: Path, plan: _Plan) -> None:
    """What the cell's logs hold once its shards ran (``CellResult.selection``), as a local run says."""
    from countgym.runner import cell_selection
    from countgym.tasks import load_dataset

    try:
        ds = load_dataset(plan.spec.env_id(), plan.spec.dataset)
    except UserError:
        return
    held = {sid for sid, _ in done_in_cell(out, plan.spec)[0]}
    plan.result.selection = cell_selection(ds, held)
    plan.result.held = len(held & set(ds.ids()))
    plan.result.asked = len(plan.spec.stimulus_ids(ds))


def _lock_cell(locks: ExitStack, out: Path, spec: CellSpec, label: str) -> bool:
    """Take the cell's lock for the whole sweep; False (with one line) when another process runs it."""
    try:
        locks.enter_context(cell_lock(out / spec.log_name()))
    except CellBusyError as e:
        print(f"{label} skipped: {e}")
        return False
    return True


def _plan_cell(
    index: int, spec: CellSpec, out: Path, run_id: str, force: bool, shard_size: int | None, slots: int,
    retry_errors: bool = True,
) -> _Plan:
    """Prepare one cell like ``run_cell`` does, and cut its pending episodes into shards."""
    from countgym.agents.registry import check_agent_task, is_model_arm, policy_factory
    from countgym.preflight import check_cell
    from countgym.tasks import load_dataset, task_of_env

    env_id = spec.env_id()
    check_agent_task(spec.agent, task_of_env(env_id), env_id)
    out.mkdir(parents=True, exist_ok=True)
    if force:
        clear_cell(out, spec)
    log = out / spec.log_name()
    write_cell_header(out / (log.stem + ".cell.json"), spec)
    if not is_model_arm(spec.agent):
        # Fail fast here on a bad plug-in spec or option, not once per Ray task. (Model arms
        # would load weights or build clients here; their backends are built in the tasks.)
        policy_factory(spec.agent, spec.model, spec.agent_options)
    for f in cell_log_files(out, spec):
        LogWriter(f)  # cut a half-written last line left by a killed writer
    retried = drop_transient_errors(cell_log_files(out, spec)) if retry_errors else 0
    done, cost = done_in_cell(out, spec)
    ds = load_dataset(env_id, spec.dataset)
    ids = spec.stimulus_ids(ds)
    check_cell(spec.agent, ds, ids, env=env_id)
    todo = [(sid, r) for r in range(spec.repeats) for sid in ids if (sid, r) not in done]
    result = CellResult(log=log, skipped=len(ids) * spec.repeats - len(todo), cost=cost, retried=retried)
    size = shard_size or max(1, min(MAX_AUTO_SHARD, math.ceil(len(todo) / (2 * slots))))
    folder = shard_dir(out, spec)
    shards = [
        _Shard(index, folder / f"{run_id}-{k:04d}.jsonl", todo[i : i + size])
        for k, i in enumerate(range(0, len(todo), size))
    ]
    return _Plan(spec, result, shards)


def _drive(
    ray: Any, remote: Any, plans: list[_Plan], cfg: SweepConfig, out: Path, in_flight: int, progress: bool
) -> None:
    """Submit shards in cell order, keep ``in_flight`` running, stop launching at the cap."""
    queue = [s for p in plans for s in p.shards]
    total = sum(len(s.pairs) for s in queue)
    spent = sum(p.result.cost for p in plans)
    bar = tqdm(total=total, desc=f"ray: {len(plans)} cells", unit="ep", disable=not progress, dynamic_ncols=True)
    pending: dict[Any, _Shard] = {}
    nxt = 0
    errors = 0
    try:
        while nxt < len(queue) or pending:
            while nxt < len(queue) and len(pending) < in_flight:
                if cfg.max_cost is not None and spent >= cfg.max_cost:
                    for s in queue[nxt:]:
                        plans[s.cell].result.stopped_by_cost = True
                    nxt = len(queue)
                    break
                s = queue[nxt]
                nxt += 1
                left = None if cfg.max_cost is None else cfg.max_cost - spent
                spec = plans[s.cell].spec
                ref = remote.remote(spec, str(out), str(s.path), s.pairs, cfg.concurrency, left)
                pending[ref] = s
            if not pending:
                break
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                s = pending.pop(ref)
                res = plans[s.cell].result
                try:
                    summary = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - a failed task leaves its episodes pending
                    # Nothing of this shard is lost: whatever it logged stays, the rest is simply
                    # not logged and a re-run picks it up.
                    msg = " ".join(f"{type(e).__name__}: {e}".split())[:600]
                    res.error_messages.append(f"shard {s.path.name} failed: {msg}")
                    summary = _summary_of(s.path)
                res.ran += summary["ran"]
                res.errors += summary["errors"]
                res.cost += summary["cost"]
                res.stopped_by_cost |= summary["stopped_by_cost"]
                spent += summary["cost"]
                errors += summary["errors"]
                room = 20 - len(res.error_messages)
                res.error_messages.extend(summary["error_messages"][: max(room, 0)])
                bar.update(summary["ran"])
                bar.set_postfix(cost=f"${spent:.4f}", errors=errors, refresh=False)
    finally:
        bar.close()
        for ref in pending:  # only when interrupted: stop what is still running
            ray.cancel(ref, force=True)


def _summary_of(path: Path) -> dict[str, Any]:
    """What a failed shard task managed to log (it may have died after some episodes)."""
    done, cost = done_in_files([path]) if path.exists() else (set(), 0.0)
    return {"ran": len(done), "errors": 0, "cost": cost, "stopped_by_cost": False, "error_messages": []}


# --- the Ray task ---------------------------------------------------------------------------------
def _run_shard(
    spec: CellSpec,
    out: str,
    shard_path: str,
    pairs: list[tuple[str, int]],
    concurrency: int,
    max_cost: float | None,
) -> dict[str, Any]:
    """Run one shard's episodes into its own log file (a Ray task; also callable directly)."""
    from countgym.agents.registry import policy_factory
    from countgym.tasks import load_dataset

    path = Path(shard_path)
    writer = LogWriter(path)
    # A task retried by Ray after its worker died finds its own earlier records: skip them.
    already, _ = done_in_files([path]) if path.exists() else (set(), 0.0)
    pairs = [p for p in pairs if tuple(p) not in already]
    ds = load_dataset(spec.env_id(), spec.dataset)
    factory = policy_factory(spec.agent, spec.model, spec.agent_options, concurrency=concurrency)
    log_stem = Path(spec.log_name()).stem
    summary: dict[str, Any] = {"ran": 0, "errors": 0, "cost": 0.0, "stopped_by_cost": False, "error_messages": []}
    lock = threading.Lock()

    def record(rec: EpisodeRecord) -> None:
        with lock:
            writer.append(rec)
            summary["ran"] += 1
            summary["cost"] += step_spend(rec.steps)[0]
            if rec.end == "error":
                summary["errors"] += 1
                if len(summary["error_messages"]) < 20:
                    summary["error_messages"].append(f"{rec.stimulus_id}: {rec.error}")

    def over_budget() -> bool:
        return max_cost is not None and summary["cost"] >= max_cost

    env_id = spec.env_id()  # once per task: resolving reads the dataset's manifest

    def one(sid: str, r: int) -> EpisodeRecord:
        return run_one(spec, ds, factory, log_stem, sid, r, env_id)

    if run_pairs(pairs, one, record, over_budget, concurrency):
        summary["stopped_by_cost"] = True
    return summary
