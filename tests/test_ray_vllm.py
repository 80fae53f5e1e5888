"""Local models at scale, client side: a vLLM OpenAI-compatible endpoint (``vllm serve MODEL``)
reached through the litellm backend as ``hosted_vllm/MODEL`` with ``api_base``, exercised against
the local test server standing in for vLLM (same routes, same wire format)."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image

pytest.importorskip("litellm")

from countgym.agents.registry import cell_env_options  # noqa: E402
from countgym.logs import read_records  # noqa: E402
from countgym.runner import CellSpec, run_cell  # noqa: E402
from countgym.testing.server import TestServer  # noqa: E402

SERVED = "Qwen/Qwen2.5-VL-7B-Instruct"
MODEL = f"hosted_vllm/{SERVED}"


def _spec(tiny_dataset, arm: str, **options) -> CellSpec:
    return CellSpec(
        dataset=str(tiny_dataset.root),
        agent=arm,
        model=MODEL,
        env_options=cell_env_options(arm),
        agent_options=options,
        repeats=2,
    )


def test_hosted_vllm_tag_loop_talks_to_the_served_model(tiny_dataset, tmp_path: Path) -> None:
    with TestServer() as srv:
        res = run_cell(_spec(tiny_dataset, "tag", api_base=srv.base_url), tmp_path, concurrency=4, progress=False)
        body = srv.last_request
    assert res.ran == 6 and res.errors == 0
    # litellm strips the provider prefix: vLLM sees its --served-model-name.
    assert body is not None and body["model"] == SERVED and body["temperature"] == 0.0
    url = next(p["image_url"]["url"] for m in body["messages"] for p in m["content"] if isinstance(m["content"], list) and p.get("type") == "image_url")
    assert url.startswith("data:image/png;base64,")
    with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as im:
        assert im.size == (768, 768)
    recs = read_records([res.log])
    assert all(r.answer == r.truth.n and r.end == "answer" for r in recs)
    steps = [s for r in recs for s in r.steps]
    # Usage comes from the server; a local model has no price: cost is null, never a crash.
    assert all(s.usage and s.usage.prompt_tokens and s.usage.completion_tokens for s in steps)
    assert all(s.cost is None for s in steps) and res.cost == 0.0
    assert {r.model for r in recs} == {MODEL}


def test_hosted_vllm_with_configured_prices_records_cost(tiny_dataset, tmp_path: Path) -> None:
    with TestServer() as srv:
        res = run_cell(
            _spec(tiny_dataset, "direct", api_base=srv.base_url, input_cost_per_token=1e-6, output_cost_per_token=2e-6),
            tmp_path,
            progress=False,
        )
    recs = read_records([res.log])
    for s in (s for r in recs for s in r.steps):
        want = s.usage.prompt_tokens * 1e-6 + s.usage.completion_tokens * 2e-6
        assert s.cost == pytest.approx(want)
    assert res.cost == pytest.approx(sum(s.cost for r in recs for s in r.steps)) and res.cost > 0


def test_hosted_vllm_server_faults_are_retried(tiny_dataset, tmp_path: Path) -> None:
    # vLLM answers 503 while loading / overloaded; the backend retries and the run is complete.
    with TestServer(schedule=["503", "500", "ok"]) as srv:
        res = run_cell(
            _spec(tiny_dataset, "direct", api_base=srv.base_url, backoff_base_s=0.01, backoff_max_s=0.02),
            tmp_path,
            progress=False,
        )
        assert srv.fault_counts["503"] == 1 and srv.fault_counts["500"] == 1
    assert res.ran == 6 and res.errors == 0
