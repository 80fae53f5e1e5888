"""Every module of the package imports in the quick tier (``pytest -m "not slow"``), so a module
that no longer imports on the light ``test`` install fails fast. A module may be skipped only
when an optional dependency it needs is missing, and the skip names that dependency and its
extra."""

from __future__ import annotations

import importlib
import tomllib
from importlib.util import find_spec
from pathlib import Path

import pytest

from countgym.errors import MissingExtraError

ROOT = Path(__file__).resolve().parent.parent

# Top-level names of the optional dependencies, and the extra that installs each.
OPTIONAL = {
    "litellm": "api",
    "torch": "local",
    "transformers": "local",
    "tokenizers": "local",
    "bpy": "blender",
    "av": "video",
    "pyarrow": "photos",
    "ray": "ray",
    "trl": "trl",
    "datasets": "trl",
    "inspect_ai": "inspect",
    "verifiers": "verifiers",
}


def package_modules(root: Path = ROOT) -> list[str]:
    """Every module of the distribution, from the folders pyproject.toml maps to packages."""
    folders = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    mods = set()
    for pkg, folder in folders.items():
        for path in (root / folder).rglob("*.py"):
            rel = path.relative_to(root / folder).with_suffix("")
            if "__pycache__" in rel.parts:
                continue
            parts = [p for p in rel.parts if p != "__init__"]
            mods.add(".".join([pkg, *parts]))
    return sorted(mods)


def missing_optional(exc: ImportError) -> str | None:
    """The optional dependency whose absence raised ``exc``, or None for any other import error."""
    name = (getattr(exc, "name", None) or "").partition(".")[0]
    return name if name in OPTIONAL else None


MODULES = package_modules()


def test_the_module_list_is_complete() -> None:
    assert len(MODULES) > 100
    for name in ("countgym.cli", "countgym.envs.image_env", "countgym.agents.backends.transformers_backend",
                 "countgym.scenes.video.blender", "countgym.analysis.audit", "countgym.integrations.trl"):
        assert name in MODULES


def test_a_missing_optional_dependency_is_told_apart_from_a_broken_module() -> None:
    assert missing_optional(ModuleNotFoundError("No module named 'torch'", name="torch")) == "torch"
    assert missing_optional(ModuleNotFoundError("No module named 'torch.nn'", name="torch.nn")) == "torch"
    assert missing_optional(ModuleNotFoundError("No module named 'numpyy'", name="numpyy")) is None
    assert missing_optional(ImportError("cannot import name 'x' from 'countgym.envs'")) is None


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if name.endswith(".__main__"):  # `python -m countgym` runs the command line
        monkeypatch.setattr("sys.argv", ["countgym", "--version"])
        with pytest.raises(SystemExit) as done:
            importlib.import_module(name)
        assert done.value.code == 0
        return
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        dep = missing_optional(exc)
        if dep is None:
            raise
        pytest.skip(f"{name} needs {dep}: pip install 'countgym[{OPTIONAL[dep]}]'")
    except MissingExtraError as exc:  # the module's own one-line message for a missing extra
        if find_spec(exc.package.replace("-", "_")) is not None:
            raise  # installed, yet the module could not use it
        pytest.skip(f"{name} needs {exc.package}: pip install 'countgym[{exc.extra}]'")
    assert module.__name__ == name
