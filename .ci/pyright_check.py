"""Run basedpyright (pyrightconfig.json) and fail on any error mypy would not also report.

pyright has no per-module switch like mypy's ``ignore_missing_imports``: an optional extra that
is not installed (torch, bpy, ...) is an unresolved import to it. This drops exactly those
errors, for the modules pyproject.toml's mypy overrides list, and counts the rest. An
unresolved ``countgym.*`` import is never dropped: that is what editors must resolve.

usage: python .ci/pyright_check.py [PYRIGHT ARGS...]
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def optional_modules() -> list[str]:
    """The module patterns mypy is told to ignore when missing (pyproject.toml)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    out: list[str] = []
    for override in cfg["tool"]["mypy"].get("overrides", []):
        if override.get("ignore_missing_imports"):
            mods = override["module"]
            out.extend([mods] if isinstance(mods, str) else mods)
    return out


def ignored(diag: dict, patterns: list[str]) -> bool:
    """An unresolved import of a module mypy ignores when missing."""
    if diag.get("rule") != "reportMissingImports":
        return False
    msg = diag.get("message", "")
    name = msg.split('"')[1] if msg.count('"') >= 2 else ""
    return bool(name) and not name.startswith("countgym") and any(fnmatch.fnmatchcase(name, p) for p in patterns)


def main(argv: list[str]) -> int:
    exe = shutil.which("basedpyright", path=str(Path(sys.executable).parent)) or shutil.which("basedpyright")
    if exe is None:
        print("error: basedpyright is not installed (pip install -e '.[dev]')", file=sys.stderr)
        return 2
    proc = subprocess.run(
        [exe, "--outputjson", "--pythonpath", sys.executable, *argv],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n", file=sys.stderr)
        return 1
    patterns = optional_modules()
    errors = [d for d in report.get("generalDiagnostics", []) if d.get("severity") == "error"]
    kept = [d for d in errors if not ignored(d, patterns)]
    for d in kept:
        start = d.get("range", {}).get("start", {})
        path = Path(d.get("file", "?"))
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{start.get('line', 0) + 1}"
        print(f"{where}: {d.get('message', '').splitlines()[0]} ({d.get('rule', '')})")
    files = report.get("summary", {}).get("filesAnalyzed")
    print(f"pyright: {len(kept)} errors in {files} files "
          f"({len(errors) - len(kept)} unresolved imports of optional extras not installed here)")
    return 1 if kept else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
