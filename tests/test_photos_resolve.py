"""Dataset names of the photo sets: env roots, release folders, subsets, errors, gym ids, CLI."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from countgym.errors import UserError
from countgym.scenes.batteries import resolve_with_photos
from countgym.scenes.photos import (
    ENV_IDS,
    detect_release,
    resolve_photo_dataset,
)
from tests.test_photos_fixtures import (
    ensure_photo_resolver,
    make_countbench_release,
    make_fsc147_release,
    make_pixmo_release,
)

# The tiny releases fill no FSC-147 bin and no PixMo count.
pytestmark = pytest.mark.filterwarnings("ignore:FSC-147 bin", "ignore:PixMo-Count count")


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("releases")
    return {
        "fsc147": make_fsc147_release(base / "fsc"),
        "pixmo": make_pixmo_release(base / "pixmo", per_count=12),
        "countbench": make_countbench_release(base / "cb"),
    }


@pytest.fixture(autouse=True)
def _env(releases: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(tmp_path / "derived"))
    monkeypatch.setenv("COUNTGYM_FSC147_ROOT", str(releases["fsc147"]))
    monkeypatch.setenv("COUNTGYM_PIXMO_ROOT", str(releases["pixmo"]))
    monkeypatch.setenv("COUNTGYM_COUNTBENCH_ROOT", str(releases["countbench"]))


def test_named_sets_and_subsets() -> None:
    fsc = resolve_photo_dataset("fsc147")
    assert fsc is not None and fsc.name == "fsc147" and len(fsc) == 10
    common = resolve_photo_dataset("fsc147:common")
    assert common is not None and common.name == "fsc147:common"
    assert set(common.ids()) <= set(fsc.ids()) and all("common" in s.meta["subsets"] for s in common)
    assert resolve_photo_dataset("FSC-147:ablation") is not None
    pixmo = resolve_photo_dataset("pixmo")
    assert pixmo is not None and len(pixmo) == 9 * 12
    pc = resolve_photo_dataset("pixmo-count:common")
    assert pc is not None and len(pc) == 9 * 10  # the first 10 per count
    cb = resolve_photo_dataset("countbench")
    assert cb is not None and len(cb) == 4
    for name in ("dotarrays", "dotarrays:common", "countercount", "/no/such/folder", "lattice+rot90"):
        assert resolve_photo_dataset(name) is None


def test_paper_subsets_resolve_and_fsc_needs_no_download() -> None:
    from countgym.scenes.photos import PAPER_SUBSETS, download_photo_images

    sizes = {name: len(resolve_with_photos(name)) for names in PAPER_SUBSETS.values() for name in names}
    assert sizes["dotarrays:common"] == 50 and sizes["dotarrays:ablation"] == 68
    with pytest.raises(UserError, match="ships its images"):
        download_photo_images("fsc147", "/nowhere")


def test_cache_is_reused(releases: dict[str, Path]) -> None:
    a = resolve_photo_dataset("fsc147")
    b = resolve_photo_dataset(str(releases["fsc147"]))
    assert a is not None and b is not None and a.root == b.root


def test_release_folders_are_detected(releases: dict[str, Path]) -> None:
    assert {k: detect_release(p) for k, p in releases.items()} == {k: k for k in releases}
    ds = resolve_photo_dataset(f"{releases['pixmo']}:common")
    assert ds is not None and ds.name == "pixmo:common"
    prepared = resolve_photo_dataset("fsc147")
    assert prepared is not None
    sub = resolve_photo_dataset(f"{prepared.root}:ablation")
    assert sub is not None and all("ablation" in s.meta["subsets"] for s in sub)


def test_transformed_photo_subset() -> None:
    ds = resolve_photo_dataset("fsc147:ablation+rot180")
    assert ds is not None and ds.name == "fsc147:ablation+rot180"
    assert all(s.id.endswith("-rot180") and s.meta["transform"] == "rot180" for s in ds)


def test_errors_are_one_line_with_files_and_docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COUNTGYM_FSC147_ROOT")
    with pytest.raises(UserError) as e:
        resolve_photo_dataset("fsc147:common")
    msg = str(e.value)
    assert "COUNTGYM_FSC147_ROOT" in msg and "annotation_FSC147_384.json" in msg
    assert "github.com/cvlab-stonybrook/LearningToCountEverything" in msg and "\n" not in msg
    monkeypatch.setenv("COUNTGYM_PIXMO_ROOT", str(tmp_path))
    with pytest.raises(UserError, match=r"PixMo-Count release at .* is missing data/test-\*\.parquet.*huggingface"):
        resolve_photo_dataset("pixmo")
    with pytest.raises(UserError, match="unknown PixMo-Count subset 'ablation'; valid: common"):
        resolve_photo_dataset("pixmo:ablation")
    with pytest.raises(UserError, match="unknown dataset"):
        resolve_with_photos("no-such-battery")


def test_cli_data_command_fails_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from countgym.cli import main

    ensure_photo_resolver(monkeypatch)
    monkeypatch.delenv("COUNTGYM_FSC147_ROOT")
    rc = main(["run", "--data", "fsc147:common", "--agent", "oracle", "--out", str(tmp_path / "r"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "COUNTGYM_FSC147_ROOT" in err and "LearningToCountEverything" in err


@pytest.mark.parametrize("env_id", sorted(ENV_IDS))
def test_gym_ids_make_and_pass_check_env(env_id: str, releases: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from gymnasium.utils.env_checker import check_env

    ensure_photo_resolver(monkeypatch)
    if env_id not in gym.registry:  # until countgym/registration.py registers them
        gym.register(env_id, entry_point="countgym.envs.image_env:CountImageEnv", kwargs={"dataset": ENV_IDS[env_id]})
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert obs["image"].ndim == 3
    env.close()
    root = releases[ENV_IDS[env_id]]
    env2 = gym.make(env_id, dataset=str(root))  # the release folder given directly
    assert len(env2.unwrapped.dataset) > 0
    env2.close()
