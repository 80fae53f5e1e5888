"""The run loop: one episode, and one cell (environment x policy x options) with resume.

A cell's episodes go to one JSONL log. Re-running the same cell skips every episode already in
the log (finished or recorded as an error), so a killed run resumes without duplicates; ``force``
starts the log afresh. Every episode ends in the log: a policy or environment failure becomes a
record with ``end="error"``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import queue
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

import countgym
from countgym.celllock import cell_lock
from countgym.cells import (
    CellSpec,
    clear_log,
    done_in_files,
    drop_transient_errors,
    log_files_of,
    policy_version,
    replaced_spend,
    selection_text,
    step_spend,
    stratified_order,
)
from countgym.cpu_slots import cpu_slot
from countgym.deadlines import episode_scope
from countgym.envs import templates as tpl
from countgym.envs.actions import Reply
from countgym.errors import ProviderQuotaError, UserError
from countgym.limits import MAX_CONCURRENCY, MAX_REPEATS
from countgym.logs import ArmSpec, EpisodeRecord, LogWriter, Truth, redact, utcnow
from countgym.malloc import pin_mmap_threshold
from countgym.simulate_context import stimulus_scope
from countgym.stimulus import Dataset
from countgym.task import Task

__all__ = [
    "CellResult", "CellSpec", "done_episodes", "episode_seed", "make_env", "run_cell",
    "run_episode", "run_one", "run_pairs", "validate_cell",
]


@dataclass
class CellResult:
    """What a cell run did."""

    log: Path
    ran: int = 0
    skipped: int = 0
    errors: int = 0
    cost: float = 0.0
    stopped_by_cost: bool = False
    retried: int = 0
    """Episodes whose transient-error records were removed so that they run again."""
    unknown_cost_calls: int = 0
    """Model calls of this run whose cost is unknown (not counted as zero by the cap: reported)."""
    replaced_cost: float = 0.0
    """Part of ``cost`` paid by transient-error records replaced on resume (the spend ledger)."""
    error_messages: list[str] = field(default_factory=list)
    kept_errors: int = 0
    """Episodes of ``skipped`` whose kept record ended in an error (a permanent one, or any with
    ``retry_errors=False``): a resume does not run them again, ``force`` does."""
    selection: str = ""
    """The stimuli the cell's logs hold after the run (``cells.selection_text``): ``all 272``,
    ``first 6 of the stratified order (of 272)``; more than this run asked for when an earlier
    run had a larger ``--limit``."""
    asked: int = 0
    """Stimuli this run asked for (its ``--limit`` selection, or the whole dataset)."""
    held: int = 0
    """Stimuli of the dataset the cell's logs hold after the run."""


def episode_seed(base: int, stimulus_id: str, repeat: int) -> int:
    """Stable per-episode seed, independent of run order and process."""
    h = hashlib.sha256(f"{base}|{stimulus_id}|{repeat}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def make_env(
    dataset: Dataset | str, env_options: dict[str, Any], *, arm: str, model: str, env: str | None = None
) -> Any:
    """Build a cell's environment (unwrapped: checked once, in tests): the registered id
    ``env``, or the environment of the dataset's task."""
    from countgym.tasks import env_for_dataset, make_task_env

    if not env:
        # A Dataset object is claimed by its folder (its manifest says which task it is).
        env = env_for_dataset(dataset if isinstance(dataset, str) else str(dataset.root))
    return make_task_env(env, dataset, env_options, arm=arm, model=model)


def run_episode(
    env: Any,
    policy: Any,
    stimulus_id: str,
    *,
    repeat: int = 0,
    seed: int = 0,
    episode_id: str | None = None,
    max_steps: int = 2000,
) -> EpisodeRecord:
    """Run one episode to its end and return its record (never raises on policy failures, except
    ``ProviderQuotaError``, which stops the cell). The episode's model calls share one deadline
    (``episode_scope``)."""
    with episode_scope(), stimulus_scope(stimulus_id, repeat):
        return _run_episode(env, policy, stimulus_id, repeat=repeat, seed=seed, episode_id=episode_id,
                            max_steps=max_steps)


def _run_episode(
    env: Any, policy: Any, stimulus_id: str, *, repeat: int, seed: int, episode_id: str | None, max_steps: int
) -> EpisodeRecord:
    with cpu_slot():
        obs, _info = env.reset(
            seed=seed, options={"stimulus_id": stimulus_id, "repeat": repeat, "episode_id": episode_id}
        )
    stim = env.stimulus
    # Every task env exposes the size of what the policy sees (frames for video).
    w, h = env.image_size if hasattr(env, "image_size") else env.state.original.size
    task = Task(
        obj=stim.obj,
        obj_sing=stim.obj_sing,
        image_size=(w, h),
        tools=env.tools,
        budget=env.budget,
        options=env.options(),
    )
    if getattr(policy, "uses_truth", False):
        # Count-only stimuli (no points) still hand over the count: points are then None.
        pts = None
        if stim.points is not None:
            sw, sh = env._episode["stored_size"]
            pts = [(x * 1000.0 / sw, y * 1000.0 / sh) for x, y in stim.points]
        policy.give_truth(pts, stim.n)
    if hasattr(policy, "seed") and callable(policy.seed):
        policy.seed(seed)
    try:
        policy.reset(obs, task)
    except ProviderQuotaError:
        raise
    except Exception as e:  # noqa: BLE001 - a plug-in's failure is recorded, not raised
        obs, *_ = env.step(Reply(text="", error=f"policy reset failed: {type(e).__name__}: {e}"))
        return env.episode_record()
    for _ in range(max_steps):
        # Hand the observation over without keeping it here: a policy that holds its image
        # encoded lets the pixels go while the model call is in flight.
        pending = [obs]
        del obs
        try:
            action = policy.act(pending.pop())
        except ProviderQuotaError:
            raise
        except Exception as e:  # noqa: BLE001
            action = Reply(text="", error=f"policy failed: {type(e).__name__}: {e}")
        with cpu_slot():  # rendering: at most one thread per core (``countgym.cpu_slots``)
            obs, _r, terminated, truncated, _info = env.step(action)
        if terminated or truncated:
            break
    else:
        env.step(Reply(text="", error=f"episode exceeded {max_steps} steps"))
    return env.episode_record()


_REFERENCES: dict[tuple[str, str, str, int], tuple[Any, dict[str, Any]]] = {}
_REFERENCES_LOCK = threading.Lock()


def reference_options(spec: CellSpec, ds: Dataset, env: Any = None, env_id: str | None = None) -> dict[str, Any] | None:
    """The logged environment options of the cell's reference: its agent's own defaults (a
    built-in arm without ablations, a plug-in's environment defaults). ``env`` is the cell's
    environment, reused when the cell is the reference; ``env_id`` its id when already
    resolved. None when it cannot be built."""
    from countgym.agents.registry import base_env_options

    try:
        base = base_env_options(spec.agent)
        if env is not None and spec.resolved_env_options() == base:
            return dict(env.options())
        env_id = env_id or spec.env_id()
        key = (spec.agent, spec.model, env_id, id(ds))
        with _REFERENCES_LOCK:
            hit = _REFERENCES.get(key)
        if hit is not None and hit[0] is ds:
            return dict(hit[1])
        ref = dict(make_env(ds, base, arm=spec.agent, model=spec.model or spec.agent, env=env_id).options())
        with _REFERENCES_LOCK:
            if len(_REFERENCES) > 64:
                _REFERENCES.clear()
            _REFERENCES[key] = (ds, ref)
        return dict(ref)
    except Exception:  # noqa: BLE001 - the reference is provenance; the episode must not fail on it
        return None


def _error_record(
    spec: CellSpec, dataset: Dataset, sid: str, repeat: int, seed: int, eid: str, err: str, env_id: str | None = None
) -> EpisodeRecord:
    now = utcnow()
    stim = dataset[sid]
    return EpisodeRecord(
        episode_id=eid,
        stimulus_id=sid,
        dataset=spec.dataset,
        arm=ArmSpec(
            name=spec.agent,
            options=redact({**spec.display_options(), **spec.agent_options,
                            **({"policy_version": code} if (code := policy_version(spec.agent)) else {})}),
            defaults=reference_options(spec, dataset, env_id=env_id),
        ),
        env_options=spec.display_options(),
        model=spec.model or spec.agent,
        seed=seed,
        repeat=repeat,
        end="error",
        error=err,
        truth=Truth(n=stim.n),
        countgym_version=countgym.__version__,
        template_hash=tpl.TEMPLATE_HASH,
        started_at=now,
        finished_at=now,
    )


def write_cell_header(path: Path, spec: CellSpec, provider: dict[str, Any] | None = None) -> None:
    """The cell's ``.cell.json``: its spec, provider parameters and version, credentials masked."""
    header = {**asdict(spec), "policy_version": policy_version(spec.agent), "provider": provider,
              "countgym_version": countgym.__version__}
    path.write_text(json.dumps(redact(header), indent=2, default=str))


def _note_other_versions(out: Path, log: Path, spec: CellSpec) -> None:
    """One warning when a plug-in policy starts a new cell beside cells of another version of its
    code (an edited policy is a new cell, never a mix in one log)."""
    import glob

    code = policy_version(spec.agent)
    if code is None:
        return
    prefix = log.name.rsplit("__", 1)[0] + "__"
    others = []
    for f in sorted(out.glob(glob.escape(prefix) + "*.cell.json")):
        try:
            old = json.loads(f.read_text()).get("policy_version")
        except (OSError, ValueError, AttributeError):
            continue
        if old and old != code:
            others.append((f.name.removesuffix(".cell.json") + ".jsonl", old))
    if others:
        name, old = others[-1]
        more = f" (and {len(others) - 1} more)" if len(others) > 1 else ""
        warnings.warn(f"{spec.agent}: its code changed ({old} -> {code}), so this is a new cell beside "
                      f"{name}{more}; each log holds one version, the audit labels them apart", stacklevel=2)


def done_episodes(
    log: Path, errored: set[tuple[str, int]] | None = None
) -> tuple[set[tuple[str, int]], float]:
    """(stimulus_id, repeat) pairs already in a cell's logs (the main log and any Ray shard
    logs), and the cost the cell has paid: what its records show (each episode once) plus what
    the transient-error records replaced on earlier resumes had paid (its spend ledger).
    ``errored``, when given, collects the pairs whose record ended in an error."""
    done, cost = done_in_files(log_files_of(log), errored)
    return done, cost + replaced_spend(log).cost


def run_one(
    spec: CellSpec, ds: Dataset, factory: Callable[[], Any], log_stem: str, sid: str, r: int,
    env_id: str | None = None,
) -> EpisodeRecord:
    """One episode of a cell, as every executor runs it: the same seed, episode id and record
    fields (arm options with the provider parameters, credentials redacted). Never raises.
    ``env_id``: the cell's environment id when the caller resolved it once for all episodes
    (resolving reads the dataset's manifest)."""
    seed = episode_seed(spec.seed, sid, r)
    eid = f"{log_stem}/{sid}/r{r}"
    env_id = env_id or spec.env_id()
    try:
        env = make_env(ds, spec.resolved_env_options(), arm=spec.agent, model=spec.model or spec.agent, env=env_id)
        rec = run_episode(env, factory(), sid, repeat=r, seed=seed, episode_id=eid)
        rec.dataset = spec.dataset
        rec.env = env_id
        options = {**env.options(), **spec.agent_options}
        code = policy_version(spec.agent)
        if code is not None:
            options["policy_version"] = code
        provider = getattr(factory, "provider", None)
        if provider:
            options["provider"] = provider
        rec.arm = ArmSpec(
            name=spec.agent, options=redact(options), defaults=reference_options(spec, ds, env, env_id)
        )
        rec.simulated = getattr(factory, "simulated", None)
        return rec
    except ProviderQuotaError:
        raise
    except Exception as e:  # noqa: BLE001 - an episode's failure is recorded, not raised
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        rec = _error_record(spec, ds, sid, r, seed, eid, detail, env_id)
        rec.env = env_id
        rec.simulated = getattr(factory, "simulated", None)
        return rec


def run_pairs(
    pairs: Sequence[tuple[str, int]],
    one: Callable[[str, int], EpisodeRecord],
    record: Callable[[EpisodeRecord], None],
    over_budget: Callable[[], bool],
    concurrency: int,
) -> bool:
    """Run (stimulus_id, repeat) pairs, sequentially or on ``concurrency`` threads (model calls
    are I/O bound), recording each as it finishes; no new episode starts once ``over_budget()``.
    Returns True when the spend cap stopped the run. A ``ProviderQuotaError`` stops the run too:
    no new episode starts, the ones in flight are recorded, then it is raised."""
    if concurrency <= 1:
        for sid, r in pairs:
            if over_budget():
                return True
            record(one(sid, r))
        return False
    stopped = False
    quota: ProviderQuotaError | None = None
    # Finished episodes arrive on a queue (each future's done callback): O(1) per episode, where
    # ``concurrent.futures.wait`` hooks into and out of every pending future on each call.
    done: queue.SimpleQueue[Future[EpisodeRecord]] = queue.SimpleQueue()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        pending: set[Future[EpisodeRecord]] = set()
        it: Iterator[tuple[str, int]] = iter(pairs)
        exhausted = False
        while True:
            while not exhausted and quota is None and len(pending) < concurrency:
                if over_budget():
                    stopped = exhausted = True
                    break
                nxt = next(it, None)
                if nxt is None:
                    exhausted = True
                    break
                future = pool.submit(one, *nxt)
                pending.add(future)
                future.add_done_callback(done.put)
            if not pending:
                if quota is not None:
                    raise quota
                return stopped
            finished = [_next_done(done)]
            while not done.empty():
                finished.append(done.get())
            for f in finished:
                pending.discard(f)
                try:
                    rec = f.result()
                except ProviderQuotaError as e:
                    quota = quota or e
                    continue
                record(rec)


def _next_done(done: queue.SimpleQueue[Future[EpisodeRecord]]) -> Future[EpisodeRecord]:
    """The next finished episode's future (waiting in short slices, so Ctrl-C is seen at once)."""
    while True:
        try:
            return done.get(timeout=0.5)
        except queue.Empty:
            continue


def _check_run_settings(spec: CellSpec, concurrency: int, max_cost: float | None) -> None:
    """Library callers get the command line's checks: one-line ``UserError``s, before any episode."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise UserError(f"--concurrency must be an integer from 1 to {MAX_CONCURRENCY}, got {concurrency!r}")
    if isinstance(spec.repeats, bool) or not isinstance(spec.repeats, int) or not 1 <= spec.repeats <= MAX_REPEATS:
        raise UserError(f"--repeats must be an integer from 1 to {MAX_REPEATS}, got {spec.repeats!r}")
    if spec.limit is not None and (isinstance(spec.limit, bool) or not isinstance(spec.limit, int) or spec.limit < 1):
        raise UserError(f"--limit must be a positive integer, got {spec.limit!r}")
    if max_cost is not None and not (isinstance(max_cost, int | float) and math.isfinite(max_cost) and max_cost >= 0):
        raise UserError(f"--max-cost must be a spend cap in USD >= 0 (None for no cap), got {max_cost!r}")


def _check_out_dir(out: Path) -> None:
    """The run folder can be made and written: its nearest existing part is a writable folder."""
    if "\x00" in str(out):
        raise UserError(f"--out {str(out)!r}: a folder name cannot hold a NUL character")
    probe = out.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"--out {out}: a file is in the way ({probe} is a file; a folder is needed there)")
    if not os.access(probe, os.W_OK):
        raise UserError(f"--out {out}: {probe} is not writable (read-only file system or no permission)")


def validate_cell(
    spec: CellSpec,
    out_dir: str | Path,
    *,
    concurrency: int = 1,
    max_cost: float | None = None,
    dataset: Dataset | None = None,
    check_policy: bool = True,
    check_data: bool = True,
) -> tuple[str, Dataset | None]:
    """Everything ``run_cell`` checks before its first model call, as one-line ``UserError``s:
    run settings, the output folder's name, agent and task, model id and backend option values
    (without building a backend), the dataset and its manifest, environment options and media.
    ``sweep --dry-run`` and a sweep's start run it for every cell, so no cell's mistake
    surfaces after another cell's calls were paid. ``check_data=False`` leaves out what needs
    the dataset loaded (manifest, environment options, media): the dry run does so for the
    datasets countgym generates or downloads, which a run builds on first use. Returns
    (environment id, dataset or None)."""
    from countgym.agents.registry import check_agent_task, check_arm_model, check_backend_options
    from countgym.preflight import check_cell
    from countgym.tasks import load_dataset, task_of_env

    _check_run_settings(spec, concurrency, max_cost)
    if not str(out_dir).strip():
        raise UserError("--out must name a folder (an empty name would write into the current one)")
    _check_out_dir(Path(out_dir))
    env_id = spec.env_id()
    if check_policy:
        check_agent_task(spec.agent, task_of_env(env_id), env_id)
        # A placeholder or mistyped model id is refused before a dataset is built.
        check_arm_model(spec.agent, spec.model)
        check_backend_options(spec.agent, spec.model, spec.agent_options)
    if not check_data:
        return env_id, None
    ds = dataset if dataset is not None else load_dataset(env_id, spec.dataset)
    # Bad environment options are the user's mistake: fail before any episode, not per episode,
    # and before the policy's backend loads (seconds for litellm or a local model).
    make_env(ds, spec.resolved_env_options(), arm=spec.agent, model=spec.model or spec.agent, env=env_id).close()
    check_cell(spec.agent, ds, spec.stimulus_ids(ds), env=env_id)
    return env_id, ds


def run_cell(
    spec: CellSpec,
    out_dir: str | Path,
    *,
    policy_factory: Callable[[], Any] | None = None,
    dataset: Dataset | None = None,
    concurrency: int = 1,
    max_cost: float | None = None,
    force: bool = False,
    progress: bool = True,
    retry_errors: bool = True,
    wait_for_lock: bool = False,
) -> CellResult:
    """Run every (stimulus, repeat) of a cell not yet in its log; append each finished episode.

    With ``retry_errors`` (the default) the records of episodes that ended in a transient error
    (``countgym.errors.is_transient_error``: 429, 5xx, timeout, dropped connection) are removed
    first, so those episodes run again; ``False`` keeps them as they are.

    Only one process runs a cell at a time (``countgym.celllock``): when another holds it, this
    raises ``CellBusyError`` (a one-line user error), or with ``wait_for_lock`` waits and then resumes.
    """
    from countgym.agents.registry import policy_factory as make_factory

    env_id, ds = validate_cell(spec, out_dir, concurrency=concurrency, max_cost=max_cost, dataset=dataset,
                               check_policy=policy_factory is None)
    assert ds is not None
    factory = policy_factory or make_factory(spec.agent, spec.model, spec.agent_options, concurrency=concurrency)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = out / spec.log_name()
    # One writer per cell: a second process would pay for every pending episode again.
    with cell_lock(log, wait=wait_for_lock):
        return _run_cell_locked(spec, env_id, out, log, ds, factory, concurrency, max_cost, force, progress, retry_errors)


def _run_cell_locked(
    spec: CellSpec,
    env_id: str,
    out: Path,
    log: Path,
    ds: Dataset,
    factory: Callable[[], Any],
    concurrency: int,
    max_cost: float | None,
    force: bool,
    progress: bool,
    retry_errors: bool,
) -> CellResult:
    """``run_cell`` once the cell's lock is held: clear (``force``), resume, run, append."""
    if force:
        clear_log(log)
    header = out / (log.stem + ".cell.json")
    if not header.exists():
        _note_other_versions(out, log, spec)
    write_cell_header(header, spec, getattr(factory, "provider", None))
    writer = LogWriter(log)
    retried = drop_transient_errors(log_files_of(log)) if retry_errors else 0
    errored: set[tuple[str, int]] = set()
    done, cost = done_episodes(log, errored)
    ids = spec.stimulus_ids(ds)
    todo = [(sid, r) for r in range(spec.repeats) for sid in ids if (sid, r) not in done]
    kept = sum((sid, r) in errored for r in range(spec.repeats) for sid in ids)
    result = CellResult(log=log, skipped=len(ids) * spec.repeats - len(todo), cost=cost, retried=retried,
                        replaced_cost=replaced_spend(log).cost, kept_errors=kept)
    lock = threading.Lock()
    warned: list[bool] = []

    held = {sid for sid, _ in done}
    result.asked = len(ids)

    def one(sid: str, r: int) -> EpisodeRecord:
        return run_one(spec, ds, factory, log.stem, sid, r, env_id)

    label = f"{spec.agent}{' / ' + spec.model if spec.model else ''} on {Path(spec.dataset).name}"
    bar = tqdm(total=len(todo), desc=label, unit="ep", disable=not progress, dynamic_ncols=True)

    def record(rec: EpisodeRecord) -> None:
        with lock:
            writer.append(rec)
            held.add(rec.stimulus_id)
            result.ran += 1
            cost, _calls, unknown = step_spend(rec.steps)
            result.cost += cost
            result.unknown_cost_calls += unknown
            if unknown and max_cost is not None and not warned:
                warned.append(True)
                warnings.warn(
                    f"{spec.model or spec.agent}: the cost of a model call is unknown (no price for "
                    f"this model or endpoint: pass input_cost_per_token / output_cost_per_token), so "
                    f"the ${max_cost:g} spend cap cannot count it; such calls are reported as of "
                    "unknown cost", stacklevel=2)
            if rec.end == "error":
                result.errors += 1
                if len(result.error_messages) < 20:
                    result.error_messages.append(f"{rec.stimulus_id}: {rec.error}")
            bar.set_postfix(cost=f"${result.cost:.4f}", errors=result.errors, refresh=False)
            bar.update(1)

    def over_budget() -> bool:
        return max_cost is not None and result.cost >= max_cost

    if concurrency > 1:
        # Many episodes render and encode images on as many threads: keep freed buffers from
        # piling up in the allocator's per-thread heaps (``countgym.malloc``).
        pin_mmap_threshold()
    try:
        result.stopped_by_cost = run_pairs(todo, one, record, over_budget, concurrency)
    finally:
        bar.close()
        writer.close()
    result.selection = cell_selection(ds, held)
    result.held = len(held & set(ds.ids()))
    return result


def cell_selection(ds: Any, held: set[str]) -> str:
    """What a cell's logs hold of its dataset, in words (``cells.selection_text``)."""
    stimuli = getattr(ds, "stimuli", None)
    order = stratified_order(stimuli) if stimuli is not None else [[i] for i in ds.ids()]
    return selection_text(held, order)
