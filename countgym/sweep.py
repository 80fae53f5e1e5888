"""``countgym sweep CONFIG``: a grid of cells from one TOML or YAML file, resumable.

The grid is datasets x arms x models x tool sets x budgets x ablations; every cell is one
``run_cell`` with its own log, so re-running the sweep resumes every cell. A sweep-wide spend
cap stops starting episodes once the recorded cost of all cells reaches it.
"""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from countgym.errors import UserError
from countgym.runner import CellResult, CellSpec, done_episodes, run_cell

ABLATION_KEYS = {
    "verify", "numbered", "order", "perturb", "extra_tools", "thinking", "reward", "tool_cost",
    "protocol",  # "native": the tool loop over native tool calls instead of JSON in the text
    "blur_radius", "feather", "attention",  # CounterCount interventions (blur sweep of C.5.3)
}


class SweepConfig(BaseModel):
    """A sweep: the grid and how to run it. Unknown keys are errors (typos must not pass)."""

    model_config = ConfigDict(extra="forbid")

    out: str = "runs"
    """Run folder; each cell writes ``<out>/<cell>.jsonl``."""
    datasets: list[str] = Field(min_length=1)
    """Battery names (``dotarrays:common``) or dataset folders."""
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


def expand(cfg: SweepConfig) -> list[CellSpec]:
    """All cells of the grid, in a stable order."""
    from countgym.agents.registry import cell_env_options, is_model_arm

    cells: list[CellSpec] = []
    seen: set[str] = set()
    tool_sets: list[list[str] | None] = list(cfg.tool_sets) if cfg.tool_sets else [None]
    budgets: list[int | None] = list(cfg.budgets) if cfg.budgets else [None]
    for ds, arm, model, tools, budget, abl in itertools.product(
        cfg.datasets, cfg.arms, cfg.models, tool_sets, budgets, cfg.ablations
    ):
        needs_model = is_model_arm(arm)
        model = model if needs_model else ""
        if needs_model and not model:
            raise UserError(f"arm {arm!r} needs a model: set 'models' in the sweep config")
        abl = dict(abl)
        thinking = abl.get("thinking")
        env_opts = cell_env_options(arm, tools=tools, budget=budget, **abl)
        agent_opts = dict(cfg.agent_options.get(arm, {}))
        if needs_model:
            agent_opts = {**agent_opts, **cfg.model_options.get(model, {})}
            if thinking is False:
                agent_opts["thinking"] = False
        spec = CellSpec(dataset=ds, agent=arm, model=model, env_options=env_opts, agent_options=agent_opts,
                        repeats=cfg.repeats, limit=cfg.limit, seed=cfg.seed)
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
        what = f"{c.agent}{' ' + c.model if c.model else ''} on {c.dataset}"
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
