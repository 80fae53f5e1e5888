"""Run every benchmark and print one table of measured ratios against the project's targets.

    python benchmarks/run.py            # all rows
    python benchmarks/run.py env audit  # selected rows
"""

from __future__ import annotations

import importlib
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

BENCHES: dict[str, tuple[str, str]] = {
    "env": ("bench_env", "bench_env_step"),
    "scenes": ("bench_scenes", "bench_battery_generation"),
    "audit": ("bench_audit", "bench_audit"),
    "audit_100k": ("bench_audit", "bench_audit_100k"),
    "audit_full": ("bench_audit", "bench_audit_full"),
    "audit_full_100k": ("bench_audit", "bench_audit_full_100k"),
    "bootstrap": ("bench_audit", "bench_bootstrap"),
    "write_audit": ("bench_audit", "bench_write_audit"),
    "harness": ("bench_harness", "bench_harness"),
    "startup": ("bench_startup", "bench_startup"),
    "video": ("bench_video", "bench_video"),
    "ray": ("bench_scale", "bench_ray_vs_local"),
    "memory": ("bench_scale", "bench_memory"),
}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHES)
    rows = []
    for name in names:
        if name not in BENCHES:
            print(f"unknown benchmark {name!r}; choose from {', '.join(BENCHES)}", file=sys.stderr)
            return 2
        mod, fn = BENCHES[name]
        try:
            res = getattr(importlib.import_module(mod), fn)()
            results = res if isinstance(res, list) else [res]
        except Exception as e:  # noqa: BLE001 - one failing row must not hide the others
            traceback.print_exc()
            results = [{"name": name, "value": f"failed: {type(e).__name__}: {e}", "target": "", "ok": False}]
        for r in results:
            value = r.get("value", f"{r.get('seconds', float('nan')):.2f} s")
            ok = r.get("ok")
            rows.append((r.get("name", name), str(value), str(r.get("target", "")), "" if ok is None else ("ok" if ok else "MISS")))
            print(f"  done: {rows[-1][0]}", file=sys.stderr)
    w = [max(len(r[i]) for r in rows + [("benchmark", "measured", "target", "")]) for i in range(4)]
    line = lambda r: "  ".join(c.ljust(w[i]) for i, c in enumerate(r))  # noqa: E731
    print(line(("benchmark", "measured", "target", "")))
    print(line(tuple("-" * x for x in w)))
    for r in rows:
        print(line(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
