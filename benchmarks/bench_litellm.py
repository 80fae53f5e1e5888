"""Where the litellm transport's cost lies: the same model calls (a tag-loop request with one
768 x 768 PNG, against the local test server, no latency) through the direct transport and
through ``litellm.acompletion``, each in a fresh warm process under ``cProfile``; CPU per call,
and the profiled time per call split by the package the code belongs to (litellm, openai,
httpx, pydantic, ...), so the row names what the litellm path adds.

    python benchmarks/bench_litellm.py [n_calls]
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_harness import _cpu_s, _start_server  # noqa: E402


def _package(filename: str) -> str:
    """The top-level package a profiled function's file belongs to."""
    parts = Path(filename).parts
    if "site-packages" in parts:
        rest = parts[parts.index("site-packages") + 1:]
        return rest[0].split(".")[0].removesuffix(".py") if rest else "?"
    if "countgym" in parts or any(p in parts for p in ("envs", "agents", "scenes", "analysis")):
        return "countgym"
    if filename == "~":
        return "C functions (zlib, json, sockets, ...)"
    if filename.startswith("<") or "lib/python" in filename:
        return "python stdlib"
    return "other"


def _child(transport: str, url: str, n_calls: int) -> dict[str, Any]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-not-a-key")
    import numpy as np
    from PIL import Image, ImageDraw

    from countgym.agents.backends.litellm_backend import LiteLLMBackend

    backend = LiteLLMBackend("openai/blob", api_base=url, timeout_s=60, transport=transport)
    system = "You count objects with tools. Tag every object."
    rng = np.random.default_rng(0)

    def message(i: int) -> list[dict[str, Any]]:
        im = Image.new("RGB", (768, 768), "white")
        d = ImageDraw.Draw(im)
        for x, y in rng.uniform(20, 748, (8, 2)):
            d.ellipse([x - 14, y - 14, x + 14, y + 14], fill="black")
        return [{"role": "system", "content": [{"type": "text", "text": system}]},
                {"role": "user", "content": [{"type": "image", "image": np.asarray(im)},
                                             {"type": "text", "text": f"Count the dots ({i})."}]}]

    requests = [message(i) for i in range(n_calls)]
    backend.complete(message(-1))  # warm: imports, connection, first-call set-up
    from countgym.agents.backends.litellm_backend import _event_loop

    # Each thread's own CPU time: the caller's (images, messages) and the event loop's (HTTP,
    # request building, reply parsing), where the transports differ.
    main, io_thread = cProfile.Profile(time.thread_time), cProfile.Profile(time.thread_time)
    loop = _event_loop()
    loop.call_soon_threadsafe(io_thread.enable)
    cpu0, t0 = _cpu_s(), time.perf_counter()
    main.enable()
    replies = [backend.complete(m) for m in requests]
    main.disable()
    cpu, wall = _cpu_s() - cpu0, time.perf_counter() - t0
    done = __import__("threading").Event()
    loop.call_soon_threadsafe(lambda: (io_thread.disable(), done.set()))
    done.wait(10)
    if bad := [r.error for r in replies if r.error]:
        raise RuntimeError(f"{len(bad)} failed calls: {bad[0]}")
    by_pkg: dict[str, float] = {}
    for prof in (main, io_thread):
        for (filename, _, _), (_, _, tottime, _, _) in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
            key = _package(filename)
            by_pkg[key] = by_pkg.get(key, 0.0) + tottime
    funcs: dict[str, float] = {}
    for prof in (main, io_thread):
        for (filename, _, fn), (_, _, tottime, _, _) in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
            name = f"{Path(filename).name}:{fn}" if filename != "~" else fn
            funcs[name] = funcs.get(name, 0.0) + tottime
    return {"cpu_ms_per_call": 1000 * cpu / n_calls, "wall_s": wall,
            "profiled_ms_per_call": {k: 1000 * v / n_calls for k, v in by_pkg.items()},
            "top_functions_ms_per_call": {k: round(1000 * v / n_calls, 2) for k, v in sorted(funcs.items(), key=lambda kv: -kv[1])[:8]}}


def bench_litellm_profile(n_calls: int = 60) -> dict[str, Any]:
    """CPU per call of the litellm transport against the direct one, and the packages the
    difference lies in (profiled time per call, the largest first)."""
    proc, url = _start_server(0.0)
    try:
        res = {}
        for transport in ("direct", "litellm"):
            out = subprocess.run([sys.executable, __file__, "--child", transport, url, str(n_calls)],
                                 capture_output=True, text=True, timeout=600, check=False)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            if out.returncode != 0 or not lines:
                raise RuntimeError(f"{transport} child failed (exit {out.returncode}): {out.stderr.strip()[-600:]}")
            res[transport] = json.loads(lines[-1])
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    d, lt = res["direct"], res["litellm"]
    pkgs = set(d["profiled_ms_per_call"]) | set(lt["profiled_ms_per_call"])
    extra = sorted(((lt["profiled_ms_per_call"].get(k, 0.0) - d["profiled_ms_per_call"].get(k, 0.0), k) for k in pkgs),
                   reverse=True)
    where = ", ".join(f"{k} {v:+.1f}" for v, k in extra[:4])
    ratio = lt["cpu_ms_per_call"] / d["cpu_ms_per_call"]
    return {
        "name": f"litellm transport CPU per call vs direct ({n_calls} calls, one 768 px image each; profiled ms/call added by package)",
        "value": f"{ratio:.2f}x ({lt['cpu_ms_per_call']:.1f} vs {d['cpu_ms_per_call']:.1f} ms/call; {where})",
        "target": "(where the cost lies)",
        "ok": None,
        "direct": d,
        "litellm": lt,
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        raise SystemExit(0)
    row = bench_litellm_profile(*(int(a) for a in sys.argv[1:2]))
    print(f"{row['name']}: {row['value']}")
    for t in ("direct", "litellm"):
        print(t, json.dumps({k: round(v, 2) for k, v in sorted(row[t]["profiled_ms_per_call"].items(), key=lambda kv: -kv[1])}))
        print("  top functions (ms/call):", json.dumps(row[t]["top_functions_ms_per_call"]))
