"""What ships with countgym, for ``countgym list``: environment ids, batteries, arms, configs.

Sizes come from the battery designs (nothing is built or read from disk except the cache check
and the sweep configs); build costs are the estimates the cache prints before a build.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from countgym.scenes.cache import format_duration


@dataclass(frozen=True)
class BatteryRow:
    """One generated battery: its size, estimated first-build time and whether it is cached."""

    name: str
    items: int
    build_s: float
    cached: bool
    description: str


def batteries() -> list[BatteryRow]:
    """Every generated battery with its size and build cost."""
    from countgym.scenes.batteries import BATTERIES, BUILD_SECONDS_PER_ITEM, cache_root
    from countgym.scenes.counterfactual.generator import BUILD_SECONDS_PER_IMAGE, pair_specs
    from countgym.scenes.dotarrays import GENERATOR_VERSION as DOT_V
    from countgym.scenes.video.dataset import build_seconds_per_video, select_specs

    root = cache_root()
    rows = []
    for name, b in BATTERIES.items():
        n = len(b.specs())
        rows.append(BatteryRow(name, n, n * BUILD_SECONDS_PER_ITEM, _cached(root, f"{name}-v{DOT_V}"),
                               b.description))
    n_cf = 2 * len(pair_specs())
    rows.append(BatteryRow("countercount", n_cf, n_cf * BUILD_SECONDS_PER_IMAGE,
                           _cached(root, "countercount-v*"), "CounterCount factual/CF pairs"))
    n_v = len(select_specs(None, None))
    per_video = build_seconds_per_video()  # on this machine's cores, as the build estimates it
    rows.append(BatteryRow("countvideo", n_v, n_v * per_video,
                           _cached(root, "countvideo-v*-all-1920x1080"),
                           "CountVideoBench, 26 cardinalities, 1920 x 1080"))
    n_k1 = len(select_specs(1, None))
    rows.append(BatteryRow("countvideo:k1", n_k1, n_k1 * per_video,
                           _cached(root, "countvideo-v*-k1-1920x1080"),
                           "CountVideoBench, one video per cardinality (CountVideo-v0's default)"))
    return rows


def _cached(root: Path, pattern: str) -> bool:
    return any((p / "manifest.jsonl").is_file() for p in root.glob(pattern))


def env_rows() -> list[tuple[str, str, str]]:
    """(env id, default dataset, entry point) of every registered ``countgym/`` environment."""
    import gymnasium

    import countgym  # noqa: F401 - registers the environments

    return [
        (env_id, str((spec.kwargs or {}).get("dataset")), str(spec.entry_point))
        for env_id, spec in gymnasium.registry.items()
        if env_id.startswith("countgym/")
    ]


def _about(seconds: float) -> str:
    text = format_duration(seconds)
    return text if text.startswith("<") else f"~{text}"


def arm_rows() -> list[tuple[str, str, str]]:
    """(arm, task, what it is) for every built-in arm and scripted policy."""
    from countgym.agents.arms import ARMS
    from countgym.agents.cf_arm import FORMATS, INTERVENTIONS
    from countgym.agents.registry import BUILTIN_POLICIES
    from countgym.agents.video_arm import VIDEO_ARMS

    rows = [(a.name, "image", f"{a.description}; tools {', '.join(a.tools) or 'answer'}, T={a.budget}")
            for a in ARMS.values()]
    rows += [(f"cf-{f}", "countercount", f"+ any of {', '.join(INTERVENTIONS)}") for f in FORMATS]
    rows += [(name, "video", f"prompt {p}") for name, p in VIDEO_ARMS.items()]
    rows += [(name, _tasks_of(name), "scripted (no model)") for name in sorted(BUILTIN_POLICIES) if name not in ARMS]
    return rows


def _tasks_of(agent: str) -> str:
    """The tasks a scripted policy declares, or "any" when it runs on every task."""
    from countgym.agents.registry import agent_tasks

    tasks = agent_tasks(agent)
    return "any" if tasks is None or set(tasks) >= {"image", "video", "countercount"} else ", ".join(tasks)


def config_rows(folder: Path) -> list[tuple[str, str, str]]:
    """(config file, cells, datasets) of the sweep configs in ``folder``."""
    from countgym.errors import UserError
    from countgym.sweep import expand, load_config

    rows = []
    for p in sorted(folder.glob("*.toml")) + sorted(folder.glob("*.y*ml")):
        try:
            cfg = load_config(p)
            cells = str(len(expand(cfg)))
            data = ", ".join(cfg.datasets)
        except (UserError, ValueError) as e:
            cells, data = "?", f"(invalid: {e})"
        rows.append((p.name, cells, data))
    return rows


def default_config_dir() -> Path | None:
    """The repository's ``configs/`` folder when countgym runs from a checkout."""
    here = Path(__file__).resolve().parents[1] / "configs"
    return here if here.is_dir() else None


def render(config_dir: Path | None = None) -> str:
    """The whole catalogue as plain-text tables."""
    out: list[str] = []

    def table(title: str, head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
        widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=False)]
        out.append(f"{title}:")
        for r in (head, *rows):
            cells = [str(x).ljust(w) for x, w in zip(r, widths, strict=False)]
            out.append("  " + "  ".join(cells).rstrip())
        out.append("")

    bats = {b.name: b for b in batteries()}
    envs = []
    for env_id, ds, _ in env_rows():
        b = bats.get(ds)
        size = str(b.items) if b else "release"
        cost = ("cached" if b.cached else f"{_about(b.build_s)} on first use") if b else "download"
        envs.append((env_id, ds, size, cost))
    table("environments (gym.make('countgym:ID'))", ("id", "dataset", "stimuli", "build"), envs)
    table("batteries", ("name", "items", "build", "contents"),
          [(b.name, str(b.items), "cached" if b.cached else _about(b.build_s), b.description)
           for b in bats.values()])
    table("arms", ("arm", "task", "description"), arm_rows())
    folder = config_dir or default_config_dir()
    if folder is not None:
        table(f"configs ({folder.name}/)", ("config", "cells", "datasets"), config_rows(folder))
    return "\n".join(out).rstrip() + "\n"
