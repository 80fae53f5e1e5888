"""Packaging and layering: every subpackage folder is listed in pyproject.toml (so `pip install .`
ships it); the data flow and the core's layers go one way; no import circle; the core names no
task (the registry does)."""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_packaged() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    mapping = cfg["package-dir"]
    found = set()
    for pkg, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if "__pycache__" in rel.parts:
                continue
            found.add(".".join([pkg, *rel.parts]))
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


LAYERS = {
    # folder: packages it must not import (scenes -> envs <- agents, envs -> logs -> analysis)
    "scenes": ("countgym.envs", "countgym.agents", "countgym.analysis"),
    "envs": ("countgym.agents", "countgym.analysis"),
    "analysis": ("countgym.agents",),
}


def test_data_flow_stays_one_way() -> None:
    import re

    bad = []
    for folder, banned in LAYERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                m = re.match(r"\s*(?:from|import)\s+(countgym\.[\w.]+)", line)
                if m and m.group(1).startswith(banned):
                    bad.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert bad == []


# --- the import graph -----------------------------------------------------------------------------
FOLDERS = {"countgym": "countgym", "countgym.envs": "envs", "countgym.agents": "agents",
           "countgym.scenes": "scenes", "countgym.analysis": "analysis"}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg, folder in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            mods[".".join([pkg, *parts])] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Every countgym module ``name`` imports, at module level or inside functions (lazy
    imports hide circles, they do not remove them). Importing one's own parent package is not
    an edge: Python has already imported it."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = {f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in mods}
            found |= subs
            if len(subs) < len(node.names):
                found.add(mod)
    out = set()
    for mod in found:
        while mod and mod not in mods:
            mod = mod.rpartition(".")[0]
        if mod and mod != name and not name.startswith(mod + "."):
            out.add(mod)
    return out


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    """The import graph of the package, parsed once per test session (read-only)."""
    mods = _modules()
    return {name: frozenset(_imports(name, path, mods)) for name, path in mods.items()}


def _cycles(graph: Mapping[str, AbstractSet[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


# Each core module may import only the core modules listed before it in its layer order.
CORE_ORDER = ["countgym.cells", "countgym.runner", "countgym.sweep", "countgym.executors.ray_executor",
              "countgym.executors", "countgym.cli"]


def test_core_layers_go_one_way() -> None:
    graph = _graph()
    bad = []
    for i, mod in enumerate(CORE_ORDER):
        later = set(CORE_ORDER[i + 1:])
        bad += [f"{mod} imports {dep}" for dep in graph[mod] if dep in later]
    users = [m for m, deps in graph.items() if "countgym.testing.server" in deps or "countgym.testing" in deps]
    bad += [f"{m} imports the test server" for m in users if not m.startswith(("countgym.testing", "countgym.cli"))]
    assert bad == []


def _task_tokens() -> dict[str, set[str]]:
    """Names that identify each registered task: its environment module and class, its
    registered ids and their default datasets, its arm family's module."""
    import gymnasium

    import countgym  # noqa: F401 - registers the environments
    from countgym.registration import ARM_FAMILIES, TASKS
    from countgym.tasks import env_class

    tokens: dict[str, set[str]] = {}
    for task, entry in TASKS.items():
        module, _, cls = entry.env_entry.partition(":")
        names = {module.rpartition(".")[2], cls}
        for env_id, spec in gymnasium.registry.items():
            if spec.entry_point == entry.env_entry:
                names.add(env_id.partition("/")[2])
                names.add(str((spec.kwargs or {}).get("dataset", "")))
        for fam in ARM_FAMILIES:
            mod = fam.partition(":")[0]
            family = __import__(mod, fromlist=["ARM_FAMILY"]).ARM_FAMILY
            if task in family.tasks:
                names.add(mod)
        assert env_class(entry.default_env).task == task
        tokens[task] = {n.lower() for n in names if n}
    return tokens


GENERIC_MODULES = ["countgym/cells.py", "countgym/runner.py", "countgym/sweep.py", "countgym/tasks.py",
                   "countgym/cli.py", "countgym/executors/__init__.py", "countgym/executors/ray_executor.py",
                   "countgym/logs.py", "countgym/task.py", "countgym/demo.py", "countgym/preflight.py", "agents/registry.py",
                   "agents/base.py", "envs/common.py"]


def test_the_core_names_no_task() -> None:
    """Only the registry (countgym/registration.py) and each task's own modules name a task;
    docstrings may mention one as an example."""
    import ast

    tokens = _task_tokens()
    assert tokens["countercount"] >= {"cf_env", "countercountenv", "countercount-v0", "countercount"}
    bad = []
    for rel in GENERIC_MODULES:
        tree = ast.parse((ROOT / rel).read_text())
        docstrings = {  # module, class, function and attribute docstrings
            id(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        }
        for node in ast.walk(tree):
            texts: list[str] = []
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                texts.append(node.value)
            elif isinstance(node, ast.Import):
                texts += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                texts += [node.module or "", *(a.name for a in node.names)]
            elif isinstance(node, ast.Name):
                texts.append(node.id)
            elif isinstance(node, ast.Attribute):
                texts.append(node.attr)
            for text in texts:
                low = text.lower()
                for task, names in tokens.items():
                    hit = [n for n in names if n in low]
                    if hit:
                        bad.append(f"{rel}:{node.lineno}: {task} ({hit[0]}) in {text[:60]!r}")
    assert bad == []


@pytest.mark.slow
def test_docs_and_code_cite_no_file_outside_the_repository() -> None:
    """Users have the repository, not the design notes it was written from: the papers are
    cited by title and section, never by a path."""
    import re

    root = Path(__file__).resolve().parent.parent
    outside = re.compile(r"\b(contracts|quality|style|platform-notes|envs|agents|scenes|analysis)\.md\b|seeds/|shared/spec|\.\./shared")
    hits = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in {".py", ".md", ".toml", ".txt", ".yaml"} or any(
            part.startswith(".") or part in {"build", "dist"} for part in path.relative_to(root).parts
        ):
            continue
        if path.name == "test_packaging.py":
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if outside.search(line):
                hits.append(f"{path.relative_to(root)}:{i}: {line.strip()[:80]}")
    assert not hits, "\n".join(hits)
