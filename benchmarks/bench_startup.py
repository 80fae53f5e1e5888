"""Start-up: CPU seconds from interpreter start to the first model request of ``countgym run``
(tag arm, the local test server; ``transport`` "auto" is the direct OpenAI-compatible path, which
loads no litellm, "litellm" forces litellm), and to the run's notice of what it loads.

Target: the first request within 1 s of CPU, or the run says what it is loading before then.

    python benchmarks/bench_startup.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_harness import _dataset, _start_server  # noqa: E402

HEAVY = ("litellm", "torch", "transformers", "ray", "matplotlib", "pandas")

# Runs in the child before the CLI: reports the CPU spent when the notice is given and when the
# first HTTP request leaves (through either transport), and which heavy modules are loaded then.
PROBE = """
import resource, sys
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
import countgym.notices as notices
_loading = notices.loading
def loading(what):
    print(f"PROBE notice {cpu():.3f}", file=sys.stderr, flush=True)
    _loading(what)
notices.loading = loading
def first_request():
    if not getattr(first_request, "done", False):
        first_request.done = True
        heavy = ",".join(m for m in HEAVY if m in sys.modules) or "-"
        print(f"PROBE request {cpu():.3f} {heavy}", file=sys.stderr, flush=True)
# The direct transport's requests leave through httpcore's pool (from the episode's thread); the
# litellm transport's through httpx, which is imported here only when that path runs.
if "transport=litellm" not in ARGS:
    import httpcore
    _handle = httpcore.ConnectionPool.handle_request
    def handle_request(self, *a, **k):
        first_request()
        return _handle(self, *a, **k)
    httpcore.ConnectionPool.handle_request = handle_request
if "transport=litellm" in ARGS:
    import httpx
    _send = httpx.AsyncClient.send
    def send(self, *a, **k):
        first_request()
        return _send(self, *a, **k)
    httpx.AsyncClient.send = send
from countgym.cli import main
raise SystemExit(main(ARGS))
"""


def bench_startup(transport: str = "auto") -> dict[str, Any]:
    """One ``countgym run --limit 1`` in a fresh process against the local test server."""
    proc, url = _start_server(0.0)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ds = _dataset(Path(tmp) / "data", 1)
            args = ["run", "--data", str(ds.root), "--agent", "tag", "--model", "openai/blob",
                    "--agent-option", f"api_base={url}", "--out", str(Path(tmp) / "runs"), "--limit", "1",
                    "--no-progress", "--agent-option", f"transport={transport}"]
            code = f"HEAVY = {HEAVY!r}\nARGS = {args!r}\n" + PROBE
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                                 env={**os.environ, "OPENAI_API_KEY": "sk-bench-not-a-key"})
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    probes = [ln.split()[1:] for ln in out.stderr.splitlines() if ln.startswith("PROBE ")]
    notice = next((float(p[1]) for p in probes if p[0] == "notice"), None)
    request = next((p[1:] for p in probes if p[0] == "request"), None)
    if out.returncode != 0 or request is None:
        raise RuntimeError(f"countgym run failed (exit {out.returncode}): {out.stderr.strip()[-600:]}")
    first = float(request[0])
    said = f"notice of what it loads at {notice:.2f} s" if notice is not None else "no notice"
    return {
        "name": f"start-up: countgym run to its first model request (CPU; transport {transport})",
        "value": f"{first:.2f} s ({said}; loaded then: {request[1]})",
        "target": "<= 1 s, or a notice before 1 s",
        "ok": first <= 1.0 or (notice is not None and notice <= 1.0),
        "first_request_cpu_s": first,
        "notice_cpu_s": notice,
    }


if __name__ == "__main__":
    for key, val in bench_startup().items():
        print(f"{key}: {val}")
