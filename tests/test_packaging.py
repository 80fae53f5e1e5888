"""Packaging: every subpackage folder is listed in pyproject.toml, so `pip install .` ships it."""

from __future__ import annotations

import tomllib
from pathlib import Path

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
