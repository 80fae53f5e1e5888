"""Replay re-renders every observation of a logged episode byte-identically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from countgym.envs.replay import encode_png, replay_observation
from countgym.logs import read_records
from countgym.runner import CellSpec, run_cell

SCRIPT = [
    'First pass.\n{"tool":"tag","points":[[130,130],[390,260],[900,900]]}',
    '{"tool":"grid","on":true}',
    '{"tool":"crop","box":[100,100,600,400]}',
    "not json",
    '{"tool":"erase","points":[[130,130]]}',
    '{"tool":"erase","box":[800,800,1000,1000]}',
    '{"tool":"tag","mode":"replace","points":[[651,781],[911,911]]}',
    '{"tool":"answer","count":2}',
]
SEEN: list[list[np.ndarray]] = []


class Scripted:
    """Replays a fixed list of replies and keeps every observation image it was shown."""

    def reset(self, first_observation: dict[str, Any], task: Any) -> None:
        self.i = 0
        SEEN.append([first_observation["image"].copy()])

    def act(self, observation: dict[str, Any]) -> str:
        if self.i:
            SEEN[-1].append(observation["image"].copy())
        self.i += 1
        return SCRIPT[self.i - 1]


def test_every_step_replays_byte_identically(tiny_dataset, tmp_path: Path) -> None:
    SEEN.clear()
    spec = CellSpec(dataset=str(tiny_dataset.root), agent="scripted", env_options={"tools": ["tag", "crop", "erase", "grid"], "perturb": "remove"}, limit=1)
    res = run_cell(spec, tmp_path, policy_factory=Scripted, progress=False)
    (rec,) = read_records([res.log])
    assert rec.end == "answer" and len(rec.steps) == len(SCRIPT)
    shown = SEEN[0]
    for k, img in enumerate(shown):
        again = replay_observation(rec, tiny_dataset, k)
        assert again.shape == img.shape, k
        assert encode_png(again) == encode_png(img), f"observation {k} differs"
    assert replay_observation(rec, tiny_dataset, 3).shape == (614, 1024, 3)  # crop: long side capped
