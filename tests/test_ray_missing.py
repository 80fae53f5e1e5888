"""Without Ray installed, the Ray executor fails with one line naming the extra to install."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from countgym.errors import MissingExtraError, UserError
from countgym.executors.ray_executor import run_sweep_ray
from countgym.sweep import SweepConfig


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch, tiny_dataset, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    cfg = SweepConfig(out=str(tmp_path), datasets=[str(tiny_dataset.root)], arms=["oracle"])
    with pytest.raises(MissingExtraError, match=r"pip install (-e )?'\S*\[ray\]'") as e:
        run_sweep_ray(cfg, progress=False)
    assert isinstance(e.value, UserError) and len(str(e.value).splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing written before the check


def test_bad_shard_size_is_a_user_error(tiny_dataset, tmp_path: Path) -> None:
    cfg = SweepConfig(out=str(tmp_path), datasets=[str(tiny_dataset.root)], arms=["oracle"])
    with pytest.raises(UserError, match="shard_size must be >= 1, got 0"):
        run_sweep_ray(cfg, shard_size=0)
