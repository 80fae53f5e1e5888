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
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from countgym.celllock import CellBusyError
from countgym.cells import CellSpec, make_cell, resolve_source
from countgym.configtext import read_config_text
from countgym.errors import UserError
from countgym.limits import MAX_CONCURRENCY, MAX_REPEATS, config_depth_problem, nesting_message
from countgym.runner import CellResult, done_episodes, run_cell
from countgym.tasks import cell_option_keys, env_class, env_for_dataset, task_of_env

Count = Annotated[int, Field(strict=True, ge=1)]
NonNegative = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]


class Ablation(BaseModel):
    """One ablation: environment-option overrides of one cell, each checked for its type.

    Values are strict: ``verify = "false"`` is an error, not a truthy string that keeps
    verification on; numbers must be numbers and finite.
    """

    model_config = ConfigDict(extra="allow", strict=True)  # other task options: unchecked here

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
    tools: list[str] | None = None
    """Tool set of the tag loop (as ``tool_sets``; ``answer`` is always on)."""
    budget: Annotated[int, Field(strict=True, ge=0)] | None = None
    """Tool-call budget T (as ``budgets``)."""
    one_point_per_call: bool | None = None
    """One point per tag call (tag-1)."""
    protocol: Literal["json", "native"] | None = None
    """Tool protocol: the paper's JSON action line or native tool calls."""
    prompt: str | None = None
    """First-message prompt (image: tools, direct, cot, list, tiles; video: P1, P2, P3)."""
    max_side: Annotated[int, Field(strict=True, ge=1)] | None = None
    """CountVideoBench frame size cap in pixels."""
    question: Literal["mcq", "oe"] | None = None
    """CounterCount question format."""
    cue: bool | None = None
    """CounterCount cue instruction."""
    generic: bool | None = None
    """CounterCount generic subject name."""
    blur: bool | None = None
    """CounterCount blur outside the attribute box."""
    kind: Literal["factual", "cf"] | None = None
    """CounterCount images: factual or counterfactual only."""
    blur_radius: NonNegative | None = None
    """CounterCount blur radius in pixels."""
    feather: NonNegative | None = None
    """CounterCount blur feathering in pixels."""
    attention: str | None = None
    """CounterCount attention-modulation config name."""


ABLATION_KEYS = cell_option_keys()
"""Every option some task's environment takes (each task's ``CELL_OPTIONS``)."""


class EnvSource(BaseModel):
    """An environment of a sweep, with the dataset it runs on (default: the id's own)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    dataset: str | None = None


class SweepConfig(BaseModel):
    """A sweep: the grid and how to run it. Unknown keys are errors (typos must not pass); values
    are strict (no string for a number or a flag, no float for an integer)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    out: Annotated[str, Field(pattern=r"\S")] = "runs"
    """Run folder; each cell writes ``<out>/<cell>.jsonl`` (an empty name is refused)."""
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


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate a sweep config; mistakes become one-line ``UserError``s."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"no such sweep config: {p}")
    if p.suffix not in (".toml", ".yaml", ".yml"):
        raise UserError(f"sweep config must be .toml, .yaml or .yml, got {p.name}")
    text = read_config_text(p)
    try:
        data = tomllib.loads(text) if p.suffix == ".toml" else load_yaml(text)
    except RecursionError:
        raise UserError(f"{p}: cannot parse: {nesting_message()}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise UserError(f"{p}: cannot parse: {where}{e.problem or e.context}") from None
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise UserError(f"{p}: cannot parse: {str(e).splitlines()[0]}") from None
    if data is not None and not isinstance(data, dict):
        raise UserError(f"{p}: the top level must be a table of keys (datasets, arms, ...), got {type(data).__name__}")
    deep = config_depth_problem(data)
    if deep:
        raise UserError(f"{p}: {deep}")
    _check_keys(p, data or {})
    try:
        return SweepConfig.model_validate(data or {})
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise UserError(f"{p}: {loc}: {err['msg'].removeprefix('Value error, ')}") from None


def _did_you_mean(key: str, valid: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _unknown(where: str, keys: Any, valid: list[str]) -> str | None:
    """One line for the first key of ``keys`` not in ``valid``, or None."""
    for key in keys:
        if key not in valid:
            return f"{where}unknown key {key!r}{_did_you_mean(str(key), valid)}; valid keys: {', '.join(valid)}"
    return None


def _check_keys(path: Path, data: dict[str, Any]) -> None:
    """Unknown keys (top level, an ``envs`` table, an ablation) as one line with a did-you-mean;
    the types are pydantic's to check."""
    problems = [_unknown("", data, list(SweepConfig.model_fields))]
    envs = data.get("envs")
    if isinstance(envs, list):
        problems += [_unknown(f"envs.{i}: ", e, list(EnvSource.model_fields))
                     for i, e in enumerate(envs) if isinstance(e, dict)]
    ablations = data.get("ablations")
    if isinstance(ablations, list):
        problems += [_unknown(f"ablations.{i}: ", a, sorted(ABLATION_KEYS))
                     for i, a in enumerate(ablations) if isinstance(a, dict)]
    for arms_or_models, options in (("arms", "agent_options"), ("models", "model_options")):
        names, table = data.get(arms_or_models), data.get(options)
        if isinstance(table, dict) and isinstance(names, list):
            for key in table:
                if key not in names:
                    problems.append(f"{options}: {key!r} is not one of the sweep's {arms_or_models}"
                                    f"{_did_you_mean(str(key), [str(n) for n in names])}; "
                                    f"its options would apply to nothing")
    first = next((m for m in problems if m), None)
    if first:
        raise UserError(f"{path}: {first} (see docs/sweeps.md)")


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


@dataclass(frozen=True)
class Skipped:
    """A grid point left out of a sweep, and why."""

    agent: str
    env: str
    dataset: str
    reason: str


def expand(
    cfg: SweepConfig, *, skipped: list[Skipped] | None = None, notes: list[str] | None = None
) -> list[CellSpec]:
    """All cells of the grid, in a stable order. Pairs whose agent does not run on the source's
    task go to ``skipped`` (when given); an agent that runs on none of the sources, or an
    ablation key no source's environment takes, is a ``UserError``.

    A tool set, budget or ablation key that does not change what an arm sends or does on a
    source (``countgym.agents.registry.agent_takes``: a tool set for ``direct``, a budget on the
    video task, ``verify`` for ``cot``) is left out for that arm there: the arm runs as one cell
    instead of one per value, and ``notes`` (when given) gets one line per arm and task saying
    so. Cells that would run the same episodes (same options once canonical) are one cell."""
    from countgym.agents.registry import agent_takes, check_agent_name, is_model_arm, runs_on

    cells: list[CellSpec] = []
    seen: set[str] = set()
    sources = [(env, ds, env or env_for_dataset(ds)) for env, ds in cfg.sources()]
    takes = {real: frozenset(getattr(env_class(real), "CELL_OPTIONS", ())) for _, _, real in sources}
    for arm in cfg.arms:
        check_agent_name(arm)
        if not any(runs_on(arm, task_of_env(real)) for _, _, real in sources):
            tasks = sorted({task_of_env(real) for _, _, real in sources})
            raise UserError(f"arm {arm!r} runs on none of the sweep's tasks ({', '.join(tasks)})")
    model_arms = any(is_model_arm(a) for a in cfg.arms)
    for key in {k for a in cfg.ablations for k in a}:
        if not any(key in t for t in takes.values()) and not (key == "thinking" and model_arms):
            raise UserError(f"ablation key {key!r} applies to none of the sweep's environments")
    _check_anywhere(cfg, [real for _, _, real in sources])
    tool_sets: list[list[str] | None] = list(cfg.tool_sets) if cfg.tool_sets else [None]
    budgets: list[int | None] = list(cfg.budgets) if cfg.budgets else [None]
    ignored: dict[tuple[str, str], list[str]] = {}
    for (env, ds, real), arm, model, tools, budget, abl in itertools.product(
        sources, cfg.arms, cfg.models, tool_sets, budgets, cfg.ablations
    ):
        task = task_of_env(real)
        if not runs_on(arm, task):
            left_out = Skipped(arm, real, ds, f"{arm} does not run on the {task} task")
            if skipped is not None and left_out not in skipped:
                skipped.append(left_out)
            continue
        applies = agent_takes(arm, env_class(real))
        dropped = ignored.setdefault((arm, task), [])
        options: dict[str, Any] = {}
        given = [("tool_sets", "tools", tools), ("budgets", "budget", budget),
                 *((f"ablation {k}", k, v) for k, v in abl.items())]
        for what, key, value in given:  # an ablation's tools or budget replace the axis value
            if value is None:
                continue
            if key in applies:
                _check_value(real, what, key, value)
                options[key] = value
                continue
            # An ablation key of another task's environment is silent here (documented); an
            # axis, or a key this environment takes but the arm does not, is said once.
            said = not what.startswith("ablation") or key in takes[real] or key == "thinking"
            if said and what not in dropped:
                dropped.append(what)
        if "tools" in options:
            from countgym.envs.actions import canonical_tools

            options["tools"] = [t for t in canonical_tools(options["tools"]) if t != "answer"]
        needs_model = is_model_arm(arm)
        model = model if needs_model else ""
        if needs_model and not model:
            raise UserError(f"arm {arm!r} needs a model: set 'models' in the sweep config")
        agent_opts = dict(cfg.agent_options.get(arm, {}))
        if needs_model:
            agent_opts = {**agent_opts, **cfg.model_options.get(model, {})}
        tools_opt, budget_opt = options.pop("tools", None), options.pop("budget", None)
        spec = make_cell(agent=arm, env=env or None, dataset=ds, model=model, tools=tools_opt, budget=budget_opt,
                         ablations=options, agent_options=agent_opts, repeats=cfg.repeats, limit=cfg.limit,
                         seed=cfg.seed)
        same = _episodes_key(spec)
        if same not in seen:
            seen.add(same)
            cells.append(spec)
    if notes is not None:
        for (arm, task), dropped in ignored.items():
            if dropped:
                verb = "does" if len(dropped) == 1 else "do"
                notes.append(f"note: {', '.join(dropped)} {verb} not apply to {arm} on the {task} task "
                             f"(nothing it sends or does would change): no cell per value for it there")
    return cells


def _episodes_key(spec: CellSpec) -> str:
    """What a cell's episodes are made of: two cells with one key would send the same requests."""
    import json

    from countgym.logs import identity_options

    return json.dumps([spec.env_id(), spec.dataset, spec.agent, spec.model, spec.display_options(),
                       identity_options(spec.agent_options), spec.seed, spec.repeats, spec.limit],
                      sort_keys=True, default=str)


def _check_anywhere(cfg: SweepConfig, envs: list[str]) -> None:
    """A value that no environment of the sweep would take (``prompt = "hi"``) is a mistake even
    where no arm would use it: one line, naming the valid values."""
    given = [("tool_sets", "tools", t) for t in cfg.tool_sets or []]
    given += [(f"ablation {i + 1}", k, v) for i, a in enumerate(cfg.ablations) for k, v in a.items()]
    for where, key, value in given:
        takers = [e for e in dict.fromkeys(envs) if key in getattr(env_class(e), "CELL_OPTIONS", ())]
        errors = []
        for env_id in takers:
            try:
                _check_value(env_id, where, key, value)
            except UserError as e:
                errors.append(e)
        if takers and len(errors) == len(takers):
            raise errors[0]


@cache
def _init_hints(env_id: str) -> dict[str, Any]:
    import typing

    try:
        init = next(vars(c)["__init__"] for c in env_class(env_id).__mro__ if "__init__" in vars(c))
        return typing.get_type_hints(init)
    except Exception:  # noqa: BLE001 - unresolvable hints: the environment checks its options itself
        return {}


def _check_value(env_id: str, where: str, key: str, value: Any) -> None:
    """An option value the environment would refuse (a prompt, tool or reward it does not know),
    as one line before any cell is built (the dry run builds no environment for a battery)."""
    if key in ("tools", "extra_tools"):
        from countgym.envs.actions import TOOLS

        bad = [t for t in value if t not in TOOLS]
        if bad:
            raise UserError(f"{where}: unknown tool(s) {bad}: use {', '.join(TOOLS)}")
    elif key == "reward" and isinstance(value, str):
        from countgym.envs.rewards import REWARDS

        if value not in REWARDS:
            raise UserError(f"{where}: unknown reward {value!r}: use {', '.join(REWARDS)}")
    choices = _literal_choices(_init_hints(env_id).get(key))
    if choices and value not in choices:
        raise UserError(f"{where}: {key} = {value!r} is not one of {', '.join(map(repr, choices))} "
                        f"on {env_id} (see docs/sweeps.md)")


def _literal_choices(hint: Any) -> tuple[Any, ...]:
    """The values of a ``Literal`` type (also inside ``X | None``), else ()."""
    import typing

    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    return tuple(v for arg in typing.get_args(hint) for v in _literal_choices(arg))


def validate_cells(
    cfg: SweepConfig, cells: list[CellSpec], *, build: bool = True, check_policy: bool = True
) -> None:
    """What a sweep's run checks before its first model call, for every cell (``validate_cell``),
    each dataset loaded once. ``sweep --dry-run`` runs the same checks with ``build=False``: a
    dataset named by its registry name (a battery countgym generates, a photo set it downloads)
    is then not built or loaded; every folder the config names is read and checked in full.
    ``check_policy=False`` (``--simulate``) leaves the model ids and backend options out: the
    simulated model answers any name, ``REPLACE:`` placeholders included."""
    from countgym.agents.registry import check_arm_model
    from countgym.cells import folder_of
    from countgym.runner import validate_cell

    for cell in cells if check_policy else ():  # every model id first, as the run checks them
        check_arm_model(cell.agent, cell.model)
    datasets: dict[tuple[str, str], Any] = {}
    for cell in cells:
        key = (cell.env_id(), cell.dataset)
        _, datasets[key] = validate_cell(
            cell, cfg.out, concurrency=cfg.concurrency, max_cost=cfg.max_cost, dataset=datasets.get(key),
            check_data=build or folder_of(cell.dataset) is not None, check_policy=check_policy,
        )


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


def with_overrides(cfg: SweepConfig, *, out: str | None = None, limit: int | None = None) -> SweepConfig:
    """The config with ``sweep --out DIR`` and ``--limit K`` in place of its own values."""
    update: dict[str, Any] = {}
    if out is not None:
        if not str(out).strip():
            raise UserError("--out must name a folder")
        update["out"] = str(out)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UserError(f"--limit must be a positive integer, got {limit!r}")
        update["limit"] = limit
    return cfg.model_copy(update=update) if update else cfg


Prepare = Callable[[CellSpec], tuple[Callable[[], Any], Any]]
"""A cell's (policy factory, dataset), e.g. ``Simulation.prepare`` (``--simulate``)."""


def run_sweep(
    cfg: SweepConfig, *, progress: bool = True, force: bool = False, retry_errors: bool = True,
    prepare: Prepare | None = None,
) -> list[CellResult]:
    """Run every cell (resuming, transient errors re-run unless ``retry_errors`` is False),
    honouring the sweep-wide spend cap. ``prepare`` gives each cell's policy factory and
    dataset instead of the model its id names (the simulated model: any model name runs)."""
    from countgym.agents.registry import check_arm_model

    out = Path(cfg.out)
    notes: list[str] = []
    cells = expand(cfg, notes=notes)
    for line in notes:
        print(line)
    for cell in cells if prepare is None else ():  # every model id, before the first cell builds a dataset or runs
        check_arm_model(cell.agent, cell.model)
    validate_cells(cfg, cells, check_policy=prepare is None)  # every cell's mistakes, before the first call
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
        try:
            extra: dict[str, Any] = {}
            if prepare is not None:
                extra["policy_factory"], extra["dataset"] = prepare(cell)
            res = run_cell(cell, out, concurrency=cfg.concurrency, max_cost=cap, force=force, progress=progress,
                           retry_errors=retry_errors, **extra)
        except CellBusyError as e:
            # Another process runs this cell; it logs the episodes, this sweep goes on.
            print(f"[{i}/{len(cells)}] skipped: {e}")
            continue
        spent[cell.log_name()] = res.cost
        results.append(res)
    return results
