"""Editors follow the package: pyrightconfig.json's ``stubPath`` holds a link per folder that
setuptools' ``package-dir`` maps into ``countgym``, and pyright (Pylance's checker) resolves
``countgym.*`` in the checkout through it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _config() -> dict:
    return json.loads((ROOT / "pyrightconfig.json").read_text(encoding="utf-8"))


def test_stub_path_links_every_mapped_folder() -> None:
    cfg = _config()
    links = ROOT / cfg["stubPath"] / "countgym"
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    mapped = {k.split(".", 1)[1]: v for k, v in package_dir.items() if k.startswith("countgym.")}
    assert mapped  # envs, agents, scenes, analysis
    for sub, folder in mapped.items():
        assert (links / sub).resolve() == (ROOT / folder).resolve(), sub
    # Unresolved imports are reported, as errors; mypy's folder is the same one.
    assert cfg["reportMissingImports"] == "error"
    assert "$MYPY_CONFIG_FILE_DIR/" + cfg["stubPath"] in (ROOT / "pyproject.toml").read_text()


def test_the_check_keeps_countgym_imports_and_drops_only_mypys_optional_modules() -> None:
    sys.path.insert(0, str(ROOT / ".ci"))
    try:
        import pyright_check as pc
    finally:
        sys.path.pop(0)
    patterns = pc.optional_modules()
    assert "torch" in patterns and "bpy" in patterns

    def diag(name: str, rule: str = "reportMissingImports") -> dict:
        return {"rule": rule, "message": f'Import "{name}" could not be resolved'}

    assert pc.ignored(diag("bpy"), patterns) and pc.ignored(diag("torch.nn"), patterns)
    assert not pc.ignored(diag("countgym.envs.wrappers"), patterns)
    assert not pc.ignored(diag("not_a_dependency"), patterns)
    assert not pc.ignored(diag("bpy", rule="reportAttributeAccessIssue"), patterns)


@pytest.mark.slow
def test_pyright_resolves_countgym_in_the_checkout() -> None:
    exe = shutil.which("basedpyright", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("basedpyright is in the dev extra")
    # One module of each mapped folder and of the core, all importing across folders.
    files = ["agents/arms.py", "envs/wrappers.py", "analysis/audit.py", "countgym/registration.py"]
    proc = subprocess.run([exe, "--outputjson", "--pythonpath", sys.executable, *files],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = json.loads(proc.stdout)
    unresolved = [d["message"] for d in report["generalDiagnostics"]
                  if d.get("rule") == "reportMissingImports" and '"countgym' in d["message"]]
    assert report["summary"]["filesAnalyzed"] == len(files)
    assert unresolved == []
