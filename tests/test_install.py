"""The install the README's test command makes stays light (no torch, transformers or ray, so no
CUDA wheels), torch is asked for by a range, CI runs the README's command, and the tests of the
heavy extras skip cleanly when those extras are absent."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
# Distributions that belong in an extra of their own, never in the test install.
HEAVY = {"torch", "transformers", "tokenizers", "ray", "bpy", "av", "pyarrow", "inspect-ai",
         "verifiers", "trl", "datasets", "vllm", "accelerate"}
# Their import names, blocked below to stand for a light install.
HEAVY_MODULES = ["torch", "transformers", "tokenizers", "ray", "bpy", "av", "pyarrow", "inspect_ai",
                 "verifiers", "trl", "datasets"]


def _names(extra: str) -> set[str]:
    out = set()
    for spec in EXTRAS[extra]:
        req = Requirement(spec)
        out |= _names(req.extras.pop()) if req.name == "countgym" else {req.name.lower()}
    return out


def _readme_test_command() -> str:
    block = (ROOT / "README.md").read_text()
    cmd = re.search(r"^python3 -m venv \.venv && .*\[test\].* pytest -q$", block, re.M)
    assert cmd, "the README's quick start names its test command"
    return cmd.group(0)


def test_the_test_and_dev_installs_hold_nothing_heavy() -> None:
    assert {"pytest", "pytest-timeout", "hypothesis", "litellm"} <= _names("test")
    assert _names("test") & HEAVY == set()
    assert _names("dev") & HEAVY == set()


def test_torch_is_asked_for_by_a_range() -> None:
    torch = [Requirement(s) for extra in EXTRAS.values() for s in extra if Requirement(s).name == "torch"]
    assert {e for e, specs in EXTRAS.items() if any(Requirement(s).name == "torch" for s in specs)} >= {"local", "trl"}
    for req in torch:
        assert all(s.operator not in ("==", "===") for s in req.specifier), str(req)
        for version in ("2.4.0", "2.13.0", "2.15.0"):
            assert req.specifier.contains(version), f"{req} should admit {version}"
        assert not req.specifier.contains("3.0.0")


def test_ci_runs_the_readme_command_and_installs_every_tested_extra() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert _readme_test_command() in ci
    installs = " ".join(re.findall(r"pip install [^\n]*", ci))
    for extra in ("local", "ray", "trl", "inspect", "verifiers"):
        assert re.search(rf"\[[^\]]*\b{extra}\b[^\]]*\]", installs), f".ci/run installs no '{extra}' extra"
    # The CPU build first, so the extras' torch range adds no CUDA build.
    assert ci.index('pip install -q "torch==') < ci.index("local,")
    assert '-m "not slow"' in ci  # the quick tier on the light install


@pytest.mark.slow
def test_without_the_heavy_extras_every_test_module_collects(tmp_path: Path) -> None:
    """Collect the whole suite with the heavy packages made unimportable: a test module that
    imports one without ``pytest.importorskip`` is a collection error, not a skip."""
    (tmp_path / "light_install.py").write_text(textwrap.dedent(f"""
        import importlib.abc, sys

        BLOCKED = {HEAVY_MODULES!r}

        class _Absent(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, _Absent())
    """))
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "light_install",
                        "-p", "no:cacheprovider", str(ROOT / "tests")],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "error" not in r.stdout.splitlines()[-1].lower()
    # The blocker works: the modules of the heavy extras' tests were skipped, not collected.
    assert "tests/test_agents_transformers.py" not in r.stdout
