"""``countgym sweep CONFIG``: a grid of cells from one TOML or YAML file, resumable.

The grid is sources x arms x models x tool sets x budgets x ablations. A source is an
environment (``envs``: a registered id, or ``{id = ..., dataset = ...}``) or a dataset
(``datasets``: it runs in the environment of the task that claims it), so one sweep can cover
several tasks. A pair whose agent does not run on the source's task is left out (listed by
``--dry-run``), and tool sets, budgets and ablation keys apply to the sources whose environment
takes them. Every cell is one ``run_cell`` with its own log, so re-running the sweep resumes
every cell. A sweep-wide spend cap stops starting episodes once the recorded cost of all cells
reaches it.
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from countgym.cells import CellSpec, make_cell, resolve_source
from countgym.errors import UserError
from countgym.runner import CellResult, done_episodes, run_cell
from countgym.tasks import cell_option_keys, env_class, env_for_dataset, task_of_env

ABLATION_KEYS = cell_option_keys()
"""Every option some task's environment takes (each task's ``CELL_OPTIONS``)."""


class EnvSource(BaseModel):
    """An environment of a sweep, with the dataset it runs on (default: the id's own)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    dataset: str | None = None


class SweepConfig(BaseModel):
    """A sweep: the grid and how to run it. Unknown keys are errors (typos must not pass)."""

    model_config = ConfigDict(extra="forbid")

    out: str = "runs"
    """Run folder; each cell writes ``<out>/<cell>.jsonl``."""
    envs: list[str | EnvSource] = []
    """Registered environment ids (``countgym/CounterCount-v0``), or ``{id, dataset}`` tables."""
    datasets: list[str] = []
    """Battery names (``dotarrays:common``) or dataset folders (each in its task's environment)."""
    arms: list[str] = Field(min_length=1)
    """Built-in arms/policies or ``package.module:ClassName``."""
    models: list[str] = [""]
    """Model ids for model-backed arms (ignored by scripted policies)."""
    tool_sets: list[list[str]] | None = None
    """Tool sets to sweep (None: each arm's own)."""
    budgets: list[int] | None = None
    """Budgets T to sweep (None: each arm's own)."""
    ablations: list[dict[str, Any]] = [{}]
    """Environment-option overrides, one cell each: verify, numbered, order, perturb, ..."""
    repeats: int = Field(1, ge=1)
    limit: int | None = Field(None, ge=1)
    seed: int = 0
    concurrency: int = Field(1, ge=1)
    max_cost: float | None = Field(None, ge=0)
    """Sweep-wide spend cap in USD."""
    agent_options: dict[str, dict[str, Any]] = {}
    """Per-arm constructor options."""
    model_options: dict[str, dict[str, Any]] = {}
    """Per-model backend options (api_base, max_tokens, prices, ...)."""

    @field_validator("ablations")
    @classmethod
    def _known_ablations(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for a in v:
            bad = set(a) - ABLATION_KEYS
            if bad:
                raise ValueError(f"unknown ablation keys {sorted(bad)}; allowed: {sorted(ABLATION_KEYS)}")
        return v

    @model_validator(mode="after")
    def _some_source(self) -> SweepConfig:
        if not self.envs and not self.datasets:
            raise ValueError("name at least one environment ('envs') or dataset ('datasets')")
        return self

    def sources(self) -> list[tuple[str, str]]:
        """(environment id or "" for the dataset's own, dataset) of every source, in order."""
        out = []
        for e in self.envs:
            env, ds = (e, None) if isinstance(e, str) else (e.id, e.dataset)
            out.append(resolve_source(env, ds))
        out.extend(resolve_source(None, d) for d in self.datasets)
        return out

    @field_validator("budgets")
    @classmethod
    def _budgets(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(b < 0 for b in v):
            raise ValueError("budgets must be >= 0")
        return v


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate a sweep config; mistakes become one-line ``UserError``s."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"no such sweep config: {p}")
    try:
        if p.suffix == ".toml":
            data = tomllib.loads(p.read_text())
        elif p.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(p.read_text())
        else:
            raise UserError(f"sweep config must be .toml, .yaml or .yml, got {p.name}")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise UserError(f"{p}: cannot parse: {str(e).splitlines()[0]}") from None
    try:
        return SweepConfig.model_validate(data or {})
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise UserError(f"{p}: {loc}: {err['msg']}") from None


@dataclass(frozen=True)
class Skipped:
    """A grid point left out of a sweep, and why."""

    agent: str
    env: str
    dataset: str
    reason: str


def expand(cfg: SweepConfig, *, skipped: list[Skipped] | None = None) -> list[CellSpec]:
    """All cells of the grid, in a stable order. Pairs whose agent does not run on the source's
    task go to ``skipped`` (when given); an agent that runs on none of the sources, or an
    ablation key no source's environment takes, is a ``UserError``."""
    from countgym.agents.registry import check_agent_name, is_model_arm, runs_on

    cells: list[CellSpec] = []
    seen: set[str] = set()
    sources = [(env, ds, env or env_for_dataset(ds)) for env, ds in cfg.sources()]
    takes = {real: frozenset(getattr(env_class(real), "CELL_OPTIONS", ())) for _, _, real in sources}
    for arm in cfg.arms:
        check_agent_name(arm)
        if not any(runs_on(arm, task_of_env(real)) for _, _, real in sources):
            tasks = sorted({task_of_env(real) for _, _, real in sources})
            raise UserError(f"arm {arm!r} runs on none of the sweep's tasks ({', '.join(tasks)})")
    for key in {k for a in cfg.ablations for k in a}:
        if not any(key in t for t in takes.values()):
            raise UserError(f"ablation key {key!r} applies to none of the sweep's environments")
    tool_sets: list[list[str] | None] = list(cfg.tool_sets) if cfg.tool_sets else [None]
    budgets: list[int | None] = list(cfg.budgets) if cfg.budgets else [None]
    for (env, ds, real), arm, model, tools, budget, abl in itertools.product(
        sources, cfg.arms, cfg.models, tool_sets, budgets, cfg.ablations
    ):
        task = task_of_env(real)
        if not runs_on(arm, task):
            left_out = Skipped(arm, real, ds, f"{arm} does not run on the {task} task")
            if skipped is not None and left_out not in skipped:
                skipped.append(left_out)
            continue
        # Axes and ablations a task's environment does not take collapse for that source.
        tools = tools if "tools" in takes[real] else None
        budget = budget if "budget" in takes[real] else None
        thinking = abl.get("thinking")  # a backend option of model arms, on every task
        abl = {k: v for k, v in abl.items() if k in takes[real]}
        needs_model = is_model_arm(arm)
        model = model if needs_model else ""
        if needs_model and not model:
            raise UserError(f"arm {arm!r} needs a model: set 'models' in the sweep config")
        agent_opts = dict(cfg.agent_options.get(arm, {}))
        if needs_model:
            agent_opts = {**agent_opts, **cfg.model_options.get(model, {})}
            if thinking is False:
                agent_opts["thinking"] = False
        spec = make_cell(agent=arm, env=env or None, dataset=ds, model=model, tools=tools, budget=budget,
                         ablations=abl, agent_options=agent_opts, repeats=cfg.repeats, limit=cfg.limit,
                         seed=cfg.seed)
        if spec.log_name() not in seen:
            seen.add(spec.log_name())
            cells.append(spec)
    return cells


def cell_options(cell: CellSpec) -> dict[str, Any]:
    """Every option of a cell, flat: the resolved environment options as the log spells them, then agent options (credentials
    redacted; an agent option whose name an environment option has is shown as ``agent.NAME``)."""
    from countgym.logs import redact

    opts: dict[str, Any] = cell.display_options()
    for k, v in redact(cell.agent_options).items():
        opts[f"agent.{k}" if k in opts else k] = v
    return opts


def describe_cells(cells: list[CellSpec]) -> tuple[list[str], str]:
    """``(per-cell text, common text)``: each cell's name and the options in which it differs
    from the others (all of them for a lone cell), and the options every cell shares."""
    flat = [cell_options(c) for c in cells]
    keys = list(dict.fromkeys(k for o in flat for k in o))
    missing = object()
    varying = [k for k in keys if len({repr(o.get(k, missing)) for o in flat}) > 1 or len(cells) == 1]
    common = [k for k in keys if k not in varying]

    def fmt(o: dict[str, Any], ks: list[str]) -> str:
        return " ".join(f"{k}={o[k]!r}" for k in ks if k in o)

    lines = []
    for c, o in zip(cells, flat, strict=True):
        what = f"{c.agent}{' ' + c.model if c.model else ''} on {c.dataset}{' in ' + c.env if c.env else ''}"
        extra = fmt(o, varying)
        lines.append(f"{what}  {extra}" if extra else what)
    return lines, fmt(flat[0], common) if flat else ""


def run_sweep(
    cfg: SweepConfig, *, progress: bool = True, force: bool = False, retry_errors: bool = True
) -> list[CellResult]:
    """Run every cell (resuming, transient errors re-run unless ``retry_errors`` is False),
    honouring the sweep-wide spend cap."""
    out = Path(cfg.out)
    cells = expand(cfg)
    spent = {c.log_name(): done_episodes(out / c.log_name())[1] for c in cells}
    results: list[CellResult] = []
    labels, _ = describe_cells(cells)
    for i, (cell, label) in enumerate(zip(cells, labels, strict=True), 1):
        cap = None
        if cfg.max_cost is not None:
            others = sum(v for k, v in spent.items() if k != cell.log_name())
            cap = cfg.max_cost - others
            if cap <= 0:
                print(f"[{i}/{len(cells)}] {cell.log_name()}: skipped, sweep spend cap reached")
                continue
        print(f"[{i}/{len(cells)}] {label}")
        res = run_cell(cell, out, concurrency=cfg.concurrency, max_cost=cap, force=force, progress=progress,
                       retry_errors=retry_errors)
        spent[cell.log_name()] = res.cost
        results.append(res)
    return results
