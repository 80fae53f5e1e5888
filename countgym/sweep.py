"""``countgym sweep CONFIG``: a grid of cells from one TOML or YAML file, resumable.

The grid is datasets x arms x models x tool sets x budgets x ablations; every cell is one
``run_cell`` with its own log, so re-running the sweep resumes every cell. A sweep-wide spend
cap stops starting episodes once the recorded cost of all cells reaches it.
"""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from countgym.celllock import CellBusyError
from countgym.errors import UserError
from countgym.limits import MAX_CONCURRENCY, MAX_REPEATS
from countgym.runner import CellResult, CellSpec, done_episodes, run_cell

Count = Annotated[int, Field(strict=True, ge=1)]
NonNegative = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]



class Ablation(BaseModel):
    """One ablation: environment-option overrides of one cell, each checked for its type.

    Values are strict: ``verify = "false"`` is an error, not a truthy string that keeps
    verification on; numbers must be numbers and finite.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    verify: bool | None = None
    """Verification prompt on/off (Give the Model a Finger, Section 3)."""
    numbered: bool | None = None
    """Numbered tags (True) or plain marks (False)."""
    order: Literal["reading", "reverse"] | None = None
    """Tag order asked for: reading order or its reverse."""
    perturb: Literal["remove", "add"] | None = None
    """Harness perturbation after the first tag call."""
    extra_tools: list[str] | None = None
    """Tools added to the tag loop (crop, erase, grid)."""
    thinking: bool | None = None
    """Reasoning on/off for model arms."""
    reward: str | None = None
    """Reward function name (``countgym.envs.rewards``)."""
    tool_cost: Annotated[float, Field(strict=True, allow_inf_nan=False)] | None = None
    """Reward cost per tool call."""
    blur_radius: NonNegative | None = None
    """CounterCount blur radius in pixels."""
    feather: NonNegative | None = None
    """CounterCount blur feathering in pixels."""
    attention: str | None = None
    """CounterCount attention-modulation config name."""


ABLATION_KEYS = set(Ablation.model_fields)


class SweepConfig(BaseModel):
    """A sweep: the grid and how to run it. Unknown keys are errors (typos must not pass); values
    are strict (no string for a number or a flag, no float for an integer)."""

    model_config = ConfigDict(extra="forbid", strict=True)

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
    budgets: list[Annotated[int, Field(ge=0)]] | None = None
    """Budgets T to sweep (None: each arm's own)."""
    ablations: list[dict[str, Any]] = [{}]
    """Environment-option overrides, one cell each (``Ablation``): verify, numbered, order, ..."""
    repeats: Annotated[int, Field(ge=1, le=MAX_REPEATS)] = 1
    limit: Count | None = None
    seed: Annotated[int, Field(ge=0)] = 0
    concurrency: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)] = 1
    max_cost: NonNegative | None = None
    """Sweep-wide spend cap in USD (finite, >= 0)."""
    agent_options: dict[str, dict[str, Any]] = {}
    """Per-arm constructor options."""
    model_options: dict[str, dict[str, Any]] = {}
    """Per-model backend options (api_base, max_tokens, prices, ...)."""

    @field_validator("ablations")
    @classmethod
    def _known_ablations(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, a in enumerate(v):
            bad = set(a) - ABLATION_KEYS
            if bad:
                raise ValueError(f"unknown ablation keys {sorted(bad)}; allowed: {sorted(ABLATION_KEYS)}")
            try:
                Ablation.model_validate(a)
            except ValidationError as e:
                err = e.errors()[0]
                key = ".".join(str(x) for x in err["loc"])
                raise ValueError(f"ablation {i + 1}: {key} = {err['input']!r}: {err['msg']}") from None
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
            data = load_yaml(p.read_text())
        else:
            raise UserError(f"sweep config must be .toml, .yaml or .yml, got {p.name}")
    except UnicodeDecodeError as e:
        raise UserError(f"{p}: cannot parse: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise UserError(f"{p}: cannot parse: {where}{e.problem or e.context}") from None
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise UserError(f"{p}: cannot parse: {str(e).splitlines()[0]}") from None
    if data is not None and not isinstance(data, dict):
        raise UserError(f"{p}: the top level must be a table of keys (datasets, arms, ...), got {type(data).__name__}")
    try:
        return SweepConfig.model_validate(data or {})
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise UserError(f"{p}: {loc}: {err['msg'].removeprefix('Value error, ')}") from None


class _StrictYamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases and duplicate keys.

    Aliases are refused outright: a few hundred bytes of nested aliases expand to billions of
    values when the config is validated (an "alias bomb"), and a sweep config never needs them.
    A duplicate key would silently drop the first value, as a typo would.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed in a sweep config; write the values out",
                event.start_mark,
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # unhashable: the base class reports it
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """Parse a YAML config: safe types only, no aliases, no duplicate keys."""
    return yaml.load(text, Loader=_StrictYamlLoader)  # noqa: S506 - a SafeLoader subclass


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


def run_sweep(cfg: SweepConfig, *, progress: bool = True, force: bool = False) -> list[CellResult]:
    """Run every cell (resuming), honouring the sweep-wide spend cap."""
    out = Path(cfg.out)
    cells = expand(cfg)
    spent = {c.log_name(): done_episodes(out / c.log_name())[1] for c in cells}
    results: list[CellResult] = []
    for i, cell in enumerate(cells, 1):
        cap = None
        if cfg.max_cost is not None:
            others = sum(v for k, v in spent.items() if k != cell.log_name())
            cap = cfg.max_cost - others
            if cap <= 0:
                print(f"[{i}/{len(cells)}] {cell.log_name()}: skipped, sweep spend cap reached")
                continue
        print(f"[{i}/{len(cells)}] {cell.agent} {cell.model} on {cell.dataset} {cell.env_options}")
        try:
            res = run_cell(cell, out, concurrency=cfg.concurrency, max_cost=cap, force=force, progress=progress)
        except CellBusyError as e:
            # Another process runs this cell; it logs the episodes, this sweep goes on.
            print(f"[{i}/{len(cells)}] skipped: {e}")
            continue
        spent[cell.log_name()] = res.cost
        results.append(res)
    return results
