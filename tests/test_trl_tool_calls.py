"""GRPO through TRL with tool calls that happen: the tiny random SmolVLM is taught the tool-call
format by TRL's SFTTrainer on countgym trajectories, then trained with GRPOTrainer on the image
tool loop, where its `tag` calls run in countgym's environment and the re-rendered images go
back into the batch (the step that TRL 1.16 could not take on SmolVLM before
`ctrl.OneRowPerImage`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("transformers")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grpo_tiny.py"


@pytest.mark.slow
def test_warm_started_grpo_makes_tool_calls_through_trl(tmp_path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("grpo_tiny_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["grpo_tiny_example"] = mod
    spec.loader.exec_module(mod)
    assert mod.main(["--route", "warm-tools", "--warmup-steps", "80", "--workdir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["steps"] == 2
    assert max(out["tool_call_frequency"]) > 0  # TRL's own metric: the model's tool calls ran
    assert out["max_weight_change"] > 0


def test_one_row_per_image_keeps_images_and_order(tmp_path) -> None:
    from PIL import Image
    from transformers import AutoProcessor

    from countgym.agents.backends.tiny import build_tiny_smolvlm
    from countgym.integrations import trl as ctrl

    proc = ctrl.use_tool_chat_template(AutoProcessor.from_pretrained(build_tiny_smolvlm(tmp_path / "m")))
    assert isinstance(proc.image_processor, ctrl.OneRowPerImage)
    ims = [Image.new("RGB", (96, 96), c) for c in ("white", "black", "red")]
    flat = proc.image_processor(images=ims, return_tensors="pt")
    nested = proc.image_processor.__dict__["_inner"](images=[ims], return_tensors="pt")
    assert tuple(flat["pixel_values"].shape[:2]) == (3, 1) and "pixel_attention_mask" not in flat
    assert (flat["pixel_values"][:, 0] == nested["pixel_values"][0]).all()  # same images, same order
