"""A cell is (environment, policy, options): everything that identifies a run's episodes.

The task of a cell comes from its environment: a registered id (``countgym/CounterCount-v0``),
or, when only a dataset is named, the environment of the task that claims that dataset
(``countgym.tasks.env_for_dataset``). The agent is any policy; an agent that declares the tasks
it runs on (every built-in arm does) is checked against the environment's task before any
episode. ``make_cell`` builds a cell the way the CLI, sweeps and the Ray executor all do.

A cell's episodes can be spread over several log files: the main log ``<out>/<cell>.jsonl``
(the local run loop) and shard logs ``<out>/<cell>.shards/*.jsonl`` (one per Ray task). Every
file holds whole records of distinct episodes, so the audit (which reads every ``*.jsonl``
under a run folder) sees them as one run, and resume by either executor skips an episode found
in ANY of them. The file helpers here are that shared view.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countgym.errors import UserError, is_transient_error
from countgym.logs import identity_options, iter_records

SHARDS_SUFFIX = ".shards"


@dataclass(frozen=True)
class CellSpec:
    """One cell of a sweep: everything that identifies a run's episodes."""

    dataset: str
    """Battery name (optionally ``name:subset``) or dataset folder."""
    agent: str
    """Built-in policy/arm name or ``package.module:ClassName``."""
    model: str = ""
    """Model id for model-backed arms; scripted policies use their own name."""
    env_options: dict[str, Any] = field(default_factory=dict)
    """Environment options (tools, budget, verify, question, prompt, ...), on top of the arm's."""
    agent_options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the policy constructor."""
    repeats: int = 1
    limit: int | None = None
    """Run ``limit`` stimuli stratified by true count (``limited_ids``); None: all."""
    seed: int = 0
    env: str = ""
    """Registered environment id; empty: the environment of the dataset's task."""

    def env_id(self) -> str:
        """The registered environment id the cell runs (named, or the dataset's)."""
        from countgym.tasks import env_for_dataset

        return self.env or env_for_dataset(self.dataset)

    def task(self) -> str:
        """The task of the cell's environment."""
        from countgym.tasks import task_of_env

        return task_of_env(self.env_id())

    def resolved_env_options(self) -> dict[str, Any]:
        """The arm's own environment options overridden by ``env_options``."""
        from countgym.agents.registry import base_env_options

        return {**base_env_options(self.agent), **self.env_options}

    def display_options(self) -> dict[str, Any]:
        """The resolved environment options spelled as the log spells them (the tool list in
        the environment's order, ``answer`` included), for the dry-run and progress lines."""
        from countgym.envs.actions import canonical_tools

        opts = self.resolved_env_options()
        if "tools" in opts:
            opts["tools"] = canonical_tools(opts["tools"])
        return opts

    def stimulus_ids(self, dataset: Any) -> list[str]:
        """The ids of the dataset's stimuli this cell runs, in manifest order."""
        stimuli = getattr(dataset, "stimuli", None)
        if stimuli is None:  # a caller's own dataset class: ids only, so the first ``limit``
            return dataset.ids()[: self.limit] if self.limit is not None else dataset.ids()
        return limited_ids(stimuli, self.limit)

    def key(self) -> str:
        """Short hash of the options that distinguish cells with the same names."""
        # Credentials are not part of a cell's identity: a rotated key resumes the same cell.
        payload: dict[str, Any] = {
            "env": self.env_options, "agent": identity_options(self.agent_options), "seed": self.seed,
        }
        if self.env:
            payload["env_id"] = self.env  # absent for the dataset's own env: old logs resume
        code = policy_version(self.agent)
        if code is not None:
            # A plug-in's code is part of its cell: an edited policy never shares a log with the old one.
            payload["policy_version"] = code
        folder = folder_of(self.dataset)
        if folder is not None:
            # Cell ids name a folder by its name only; two folders of one name stay apart here.
            payload["folder"] = str(folder)
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:8]

    def log_name(self) -> str:
        """File name of the cell's log."""
        model = self.model or self.agent
        return f"{_slug(dataset_label(self.dataset))}__{_slug(self.agent)}__{_slug(model)}__{self.key()}.jsonl"


_SOURCE_HASHES: dict[str, tuple[Any, str]] = {}
"""Module name -> (the module object, the hash of its source file when it was first asked for)."""


def policy_version(agent: str) -> str | None:
    """The code identity of a plug-in policy (``package.module:ClassName``): the ``version`` its
    class declares (``v:<version>``), else a hash of its module's source file (``src:<hash>``),
    read once per imported module, so a process keeps the identity of the code it runs even if
    the file is edited meanwhile. None for built-in agents and for a module whose source cannot
    be read (its import error is reported where it is loaded)."""
    if ":" not in agent:
        return None
    import importlib.util

    module_name, _, attr = agent.partition(":")
    try:
        module = importlib.import_module(module_name)
        declared = getattr(getattr(module, attr, None), "version", None)
        if isinstance(declared, str | int | float) and not isinstance(declared, bool):
            return f"v:{declared}"
        memo = _SOURCE_HASHES.get(module_name)
        if memo is not None and memo[0] is module:
            return f"src:{memo[1]}"
        spec = importlib.util.find_spec(module_name)
        origin = spec.origin if spec is not None else None
        if not origin or not os.path.isfile(origin):
            return None
        digest = hashlib.sha256(Path(origin).read_bytes()).hexdigest()[:12]
        _SOURCE_HASHES[module_name] = (module, digest)
        return f"src:{digest}"
    except Exception:  # noqa: BLE001 - identity only; loading the policy reports the real problem
        return None


def _split_folder(dataset: str) -> tuple[str, str]:
    """``"/data/cc:common+rot180"`` -> ``("/data/cc", ":common+rot180")``; no suffix -> ""."""
    from countgym.scenes.transforms import TRANSFORMS

    text = str(dataset)
    m = re.search(rf"(:[A-Za-z0-9_-]+)?(\+(?:{'|'.join(map(re.escape, TRANSFORMS))}))?$", text)
    suffix = m.group(0) if m else ""
    base = text[: len(text) - len(suffix)] if suffix else text
    return (base, suffix) if base else (text, "")


def folder_of(dataset: str) -> Path | None:
    """The absolute folder a dataset names, or None for a registry name (battery, photo set)."""
    base, _ = _split_folder(dataset)
    path = Path(base).expanduser()
    if "/" in base or "\\" in base or base.startswith((".", "~")):
        return path.resolve()
    if path.is_dir() and base.lower() not in _registry_names():  # registry names come first
        return path.resolve()
    return None


def _registry_names() -> set[str]:
    from countgym.scenes.batteries import BATTERIES, OTHER_BATTERIES
    from countgym.scenes.photos.resolve import PHOTO_SETS

    return {*BATTERIES, *OTHER_BATTERIES, *(a for p in PHOTO_SETS.values() for a in (p.name, *p.aliases))}


def dataset_label(dataset: str) -> str:
    """A dataset's name for cell ids and titles: a folder's own name (never its path) with any
    ``:subset`` and ``+transform``; registry names unchanged."""
    base, suffix = _split_folder(dataset)
    if folder_of(dataset) is None:
        return str(dataset)
    return (Path(base).expanduser().resolve().name or base) + suffix


def limited_ids(stimuli: Sequence[Any], limit: int | None) -> list[str]:
    """The first ``limit`` stimulus ids of the dataset's stratified order (all, in manifest
    order, when ``limit`` is None).

    The stratified order (``stratified_order``) interleaves the count levels: round after round
    it takes one stimulus of each level that has one left, visiting the levels in an evenly
    spread order (the middle level first, then the two ends' halves, ...), and inside a level
    it takes the stimuli in an evenly spread order too (the middle one first). So the levels
    share any limit equally (a level's share differs by at most one from another's), the
    remainder goes to levels spread over the range, a level with fewer stimuli than its share
    gives them all and the rest is shared again, and a limit is a prefix: ``--limit 3`` is
    part of ``--limit 6``, which is part of the whole set. Stimuli of one pair
    (``meta.pair_id``: CounterCount's factual and counterfactual image) are one unit at the
    level of the pair's counterfactual count, so a paired dataset runs whole pairs (K or K + 1
    stimuli). Deterministic: the same manifest and limit give the same ids.
    """
    if limit is None:
        return [s.id for s in stimuli]
    out: list[str] = []
    for unit in stratified_order(stimuli):
        if len(out) >= limit:
            break
        out.extend(unit)
    return out


def stratified_order(stimuli: Sequence[Any]) -> list[list[str]]:
    """Every stimulus id in the order ``limited_ids`` takes them, as units (one id, or the ids
    of one pair)."""
    units: dict[str, list[Any]] = {}
    for s in stimuli:
        units.setdefault(str(s.meta.get("pair_id") or f"id:{s.id}"), []).append(s)
    by_level: dict[int, list[list[str]]] = {}
    for members in units.values():
        cf = [m for m in members if m.meta.get("kind") == "cf"]
        by_level.setdefault((cf or members)[0].n, []).append([m.id for m in members])
    levels = [sorted(by_level)[i] for i in spread_order(len(by_level))]
    queues = {n: [by_level[n][i] for i in spread_order(len(by_level[n]))] for n in levels}
    order: list[list[str]] = []
    for r in range(max((len(q) for q in queues.values()), default=0)):
        order.extend(queues[n][r] for n in levels if r < len(queues[n]))
    return order


def spread_order(k: int) -> list[int]:
    """``0 .. k-1`` in an evenly spread order: every prefix is spread over the range (the
    middle first, then the middles of the halves left, ...): the positions
    ``floor(f * k)`` for ``f`` = 1/2, 0, 3/4, 1/4, 5/8, 1/8, 7/8, 3/8, ... (the base-2
    van der Corput sequence shifted by a half), each taken once."""
    seen: dict[int, None] = {}
    depth = 1
    while len(seen) < k:
        for j in range(depth):
            f = (_reverse_bits(j, depth.bit_length() - 1) / depth + 0.5) % 1.0
            seen.setdefault(min(k - 1, int(f * k)), None)
        depth *= 2
    return list(seen)


def _reverse_bits(j: int, bits: int) -> int:
    return int(format(j, f"0{bits}b")[::-1], 2) if bits else 0


def selection_text(held: set[str] | frozenset[str], order: Sequence[Sequence[str]]) -> str:
    """What a cell's log holds, in words: ``all 272``, ``first 6 of the stratified order (of
    272)``, or ``5 of 272, not a prefix of the stratified order`` (a log written by another
    ``--limit`` rule, or edited)."""
    flat = [i for unit in order for i in unit]
    total = len(flat)
    inside = held & set(flat)
    if len(inside) == total:
        return f"all {total}"
    taken: set[str] = set()
    for unit in order:
        if taken >= inside:
            break
        taken.update(unit)
    if taken == inside:
        return f"first {len(inside)} of the stratified order (of {total})"
    return f"{len(inside)} of {total}, not a prefix of the stratified order"


def _slug(s: str) -> str:
    s = re.sub(r"[^A-Za-z0-9.+-]+", "-", str(s).strip("/")).strip("-")
    return s[-60:] or "x"


def resolve_source(env: str | None, dataset: str | None) -> tuple[str, str]:
    """(environment id, dataset) of a cell from ``--env`` and/or ``--data``; the environment id
    is "" when it is the dataset's own (so a cell has one name however it is given)."""
    from countgym.tasks import default_dataset, env_class, env_for_dataset

    if not env and not dataset:
        raise UserError("name an environment (--env ID) or a dataset (--data DIR|BATTERY)")
    if env:
        env_class(env)  # unknown ids fail here, naming the registered ones
        if not dataset:
            dataset = default_dataset(env)
            if dataset is None:
                raise UserError(f"environment {env} has no default dataset: pass --data")
    assert dataset is not None
    if not env:
        from countgym.scenes.batteries import check_dataset_name

        check_dataset_name(dataset)  # a mistyped name, before "the arm does not run there"
    claimed = env_for_dataset(dataset)
    if not env:
        _check_claimed(dataset, claimed)
    if env and claimed == env:
        env = ""
    return env or "", dataset


def _check_claimed(dataset: str, claimed: str) -> None:
    """A folder without a manifest that no task claims is the root of a released dataset whose
    task cannot be read from it: ask for the environment rather than guess."""
    from countgym.registration import TASKS

    root = Path(dataset).expanduser()
    fallback = list(TASKS.values())[-1].default_env
    if claimed == fallback and root.is_dir() and not (root / "manifest.jsonl").is_file():
        from countgym.tasks import load_dataset

        try:
            load_dataset(fallback, dataset)  # a release the fallback task reads (photo sets)
        except UserError as e:
            others = ", ".join(t.default_env for t in list(TASKS.values())[:-1])
            raise UserError(
                f"{root} has no manifest.jsonl, so its task is unknown: for the root of a released "
                f"dataset name its environment with --env ({others}), else give a dataset folder "
                f"({e})"
            ) from None


def make_cell(
    *,
    agent: str,
    env: str | None = None,
    dataset: str | None = None,
    model: str = "",
    tools: list[str] | None = None,
    budget: int | None = None,
    ablations: dict[str, Any] | None = None,
    agent_options: dict[str, Any] | None = None,
    repeats: int = 1,
    limit: int | None = None,
    seed: int = 0,
) -> CellSpec:
    """A validated cell: known agent, agent on its environment's task, options the environment
    (or the arm) accepts; every mistake is one ``UserError`` before any episode."""
    from countgym.agents.registry import (
        cell_env_options,
        check_agent_name,
        check_agent_task,
        is_model_arm,
    )
    from countgym.tasks import env_class, task_of_env

    check_agent_name(agent)
    env_id, dataset = resolve_source(env, dataset)
    folder = folder_of(dataset)
    if folder is not None:
        # Logs name the folder absolutely: an audit or replay from another directory finds it.
        dataset = str(folder) + _split_folder(dataset)[1]
    if limit is not None:
        from countgym.scenes.batteries import limit_source

        smaller = limit_source(dataset, limit)
        if smaller != dataset:
            warnings.warn(f"--limit {limit} on {dataset}: taking {limit} stratified by count from {smaller}, "
                          f"the smallest balanced subset that holds them (built on first use), not from "
                          f"all of {dataset}", stacklevel=2)
            env_id, dataset = resolve_source(env, smaller)
    real_env = env_id or _env_of(dataset)
    check_agent_task(agent, task_of_env(real_env), real_env)
    ablations = dict(ablations or {})
    # ``tools`` and ``budget`` may come as ablation keys (a sweep's ``ablations``) or explicitly.
    for name, given in (("tools", tools), ("budget", budget)):
        value = ablations.pop(name, None)
        if value is not None and given is not None and value != given:
            raise UserError(f"{name} given twice ({given!r} and ablation {name} = {value!r}): give it once")
        if name == "tools":
            tools = tools if tools is not None else value
        else:
            budget = budget if budget is not None else value
    thinking = ablations.get("thinking")
    env_options = cell_env_options(agent, env_class(real_env), tools=tools, budget=budget, **ablations)
    agent_options = dict(agent_options or {})
    if is_model_arm(agent):
        if not model:
            raise UserError(f"arm {agent!r} calls a model: pass --model (e.g. openai/gpt-4o-mini or hf:/path)")
        if thinking is False:
            agent_options["thinking"] = False
    elif model and ":" not in agent:
        raise UserError(f"agent {agent!r} is model-free; drop --model")
    return CellSpec(
        dataset=dataset, agent=agent, model=model,
        env_options=env_options, agent_options=agent_options, repeats=repeats, limit=limit,
        seed=seed, env=env_id,
    )


def _env_of(dataset: str) -> str:
    from countgym.tasks import env_for_dataset

    return env_for_dataset(dataset)


# --- a cell's log files ----------------------------------------------------------------------------
def shard_dir_of(log: str | Path) -> Path:
    """Shard folder beside a cell's main log ``<out>/<cell>.jsonl``: ``<out>/<cell>.shards``."""
    log = Path(log)
    return log.parent / (log.stem + SHARDS_SUFFIX)


def shard_dir(out: str | Path, spec: CellSpec) -> Path:
    """Folder of a cell's shard logs: ``<out>/<cell-stem>.shards``."""
    return shard_dir_of(Path(out) / spec.log_name())


def log_files_of(log: str | Path) -> list[Path]:
    """Every existing log file of the cell whose main log is ``log``: the main log first, then
    its shard logs (sorted). The main log need not exist."""
    log = Path(log)
    files = [log] if log.is_file() else []
    shards = shard_dir_of(log)
    if shards.is_dir():
        files.extend(sorted(p for p in shards.glob("*.jsonl") if p.is_file()))
    return files


def cell_log_files(out: str | Path, spec: CellSpec) -> list[Path]:
    """Every existing log file of a cell: the main log first, then its shard logs (sorted)."""
    return log_files_of(Path(out) / spec.log_name())


def done_in_files(
    files: list[Path], errored: set[tuple[str, int]] | None = None
) -> tuple[set[tuple[str, int]], float]:
    """(stimulus_id, repeat) pairs in the given log files and their recorded cost (each once).
    ``errored``, when given, collects the pairs whose record ended in an error.

    A line written by a newer log schema raises a ``UserError`` naming both versions: its
    episode must not be taken for missing and paid for again.
    """
    done: set[tuple[str, int]] = set()
    cost = 0.0
    for rec in iter_records(files, newer="raise"):
        key = (rec.stimulus_id, rec.repeat)
        if key in done:
            continue
        done.add(key)
        cost += step_spend(rec.steps)[0]
        if errored is not None and rec.end == "error":
            errored.add(key)
    return done, cost


def done_in_cell(out: str | Path, spec: CellSpec) -> tuple[set[tuple[str, int]], float]:
    """(stimulus_id, repeat) pairs logged in any of a cell's files, and the cost the cell has
    paid: the cost its records show plus that of the transient-error records replaced on
    earlier resumes (``spend_ledger_of``).

    An episode found twice (which the executors never write) is counted once, cost included.
    """
    log = Path(out) / spec.log_name()
    done, cost = done_in_files(log_files_of(log))
    return done, cost + replaced_spend(log).cost


def clear_log(log: str | Path) -> None:
    """Delete the main log ``log``, the shard logs beside it and its spend ledger."""
    log = Path(log)
    for f in (log, spend_ledger_of(log)):
        if f.exists():
            f.unlink()
    shards = shard_dir_of(log)
    if shards.exists():
        shutil.rmtree(shards)


def clear_cell(out: str | Path, spec: CellSpec) -> None:
    """Delete a cell's main log and shard logs (``--force``)."""
    clear_log(Path(out) / spec.log_name())


def drop_transient_errors(files: list[Path]) -> int:
    """Remove the records of episodes that ended in a transient error (429, 5xx, timeout, dropped
    connection) from log files, so that resuming runs them again instead of keeping a failure
    that says nothing about the model. Returns the records removed.

    The calls such a record paid for stay paid: their cost goes into the cell's spend ledger
    (``spend_ledger_of``) before the record leaves its file, so the spend cap keeps counting
    them. Each file is rewritten atomically (temporary file, then rename), so a kill leaves
    either the old or the new file; a record whose removal was interrupted is entered in the
    ledger once however often it is found again (entries are keyed by the record's bytes).
    """
    dropped = 0
    for f in files:
        keep: list[bytes] = []
        gone: list[bytes] = []
        with f.open("rb") as fh:
            for line in fh:
                (gone if _is_transient_line(line) else keep).append(line)
        if not gone:
            continue
        if keep and not keep[-1].endswith(b"\n"):
            keep[-1] += b"\n"  # a kept last line without its newline must not merge with the next
        _enter_replaced(main_log_of(f), gone)
        tmp = f.with_name(f".{f.name}.{os.getpid()}.retry.tmp")
        with tmp.open("wb") as out:
            out.write(b"".join(keep))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, f)
        dropped += len(gone)
    return dropped


# --- the spend ledger ------------------------------------------------------------------------------
LEDGER_SUFFIX = ".spend.json"


@dataclass
class Spend:
    """Money a cell paid for calls whose records were replaced on resume."""

    cost: float = 0.0
    """Sum of the known costs (USD)."""
    calls: int = 0
    """Model calls counted (steps of the replaced records)."""
    unknown_cost_calls: int = 0
    """Calls whose cost was unknown (never counted as zero: reported as unknown)."""


def main_log_of(f: str | Path) -> Path:
    """The main log of the cell a log file belongs to (itself, or the log its shard folder serves)."""
    f = Path(f)
    if f.parent.name.endswith(SHARDS_SUFFIX):
        return f.parent.parent / (f.parent.name[: -len(SHARDS_SUFFIX)] + ".jsonl")
    return f


def spend_ledger_of(log: str | Path) -> Path:
    """The spend ledger of the cell whose main log is ``log``: ``<out>/<cell-stem>.spend.json``.

    It holds one entry per transient-error record removed on resume (episode, times, cost,
    calls), so a resume never forgets what the removed record had paid."""
    log = Path(log)
    return log.parent / (log.stem + LEDGER_SUFFIX)


def _read_ledger(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = data["replaced"]
        if not isinstance(entries, dict):
            raise TypeError("'replaced' is not an object")
    except (OSError, ValueError, KeyError, TypeError) as e:
        # Never guess a smaller spend: a ledger that cannot be read stops the resume.
        raise UserError(f"{path}: spend ledger cannot be read ({type(e).__name__}: {str(e)[:120]}); "
                        "restore it, or delete it to forget what replaced records had paid") from None
    return entries


def replaced_spend(log: str | Path) -> Spend:
    """What the transient-error records removed from a cell's logs had paid (from its ledger)."""
    out = Spend()
    for e in _read_ledger(spend_ledger_of(log)).values():
        cost = e.get("cost") if isinstance(e, dict) else None
        if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
            out.cost += float(cost)
        calls = e.get("calls", 0) if isinstance(e, dict) else 0
        unknown = e.get("unknown_cost_calls", 0) if isinstance(e, dict) else 0
        out.calls += calls if isinstance(calls, int) and calls >= 0 else 0
        out.unknown_cost_calls += unknown if isinstance(unknown, int) and unknown >= 0 else 0
    return out


def _enter_replaced(log: Path, lines: list[bytes]) -> None:
    """Add the spend of records about to be removed to the cell's ledger (atomically, once each)."""
    path = spend_ledger_of(log)
    entries = _read_ledger(path)
    added = False
    for line in lines:
        key = hashlib.sha256(line.rstrip(b"\r\n")).hexdigest()
        if key in entries:
            continue
        data = json.loads(line)
        cost, calls, unknown = step_spend(data.get("steps"))
        entries[key] = {
            "episode_id": str(data.get("episode_id")), "started_at": str(data.get("started_at")),
            "finished_at": str(data.get("finished_at")), "error": str(data.get("error"))[:200],
            "cost": cost, "calls": calls, "unknown_cost_calls": unknown,
        }
        added = True
    if not added:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as out:
        json.dump({"schema": 1, "replaced": entries}, out, indent=1)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def step_spend(steps: Any) -> tuple[float, int, int]:
    """(known cost, calls, calls of unknown cost) of a record's steps (dicts or ``StepRecord``s).

    A step is an answered model call when it has a cost or usage, or a timed reply (text or
    tool calls); a failed call (no reply) and a scripted step are none. The cost of an answered
    call that is missing, negative or not finite is unknown (never zero)."""
    cost, calls, unknown = 0.0, 0, 0
    for s in steps or []:
        get = s.get if isinstance(s, dict) else (lambda k, s=s: getattr(s, k, None))
        c = get("cost")
        replied = get("latency_s") is not None and bool(get("reply") or get("tool_calls"))
        if c is None and get("usage") is None and not replied:
            continue  # a typed or scripted action, or a call that failed without a reply
        calls += 1
        if isinstance(c, int | float) and not isinstance(c, bool) and math.isfinite(c) and c >= 0:
            cost += float(c)
        else:
            unknown += 1
    return cost, calls, unknown


def _is_transient_line(line: bytes) -> bool:
    if b'"end":"error"' not in line and b'"end": "error"' not in line:  # most lines are not errors
        return False
    try:
        data = json.loads(line)
    except ValueError:
        return False  # a corrupt line is the readers' to report, not ours to drop
    return isinstance(data, dict) and data.get("end") == "error" and is_transient_error(data.get("error"))
