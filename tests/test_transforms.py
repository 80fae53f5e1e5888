"""Control transforms keep the ground truth aligned with the pixels (oracle stays perfect)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image, ImageColor

from countgym.errors import UserError
from countgym.scenes.transforms import (
    fit_long_side,
    mirror,
    rotate180,
    split_transform,
    transform_box,
    transform_points,
    transform_stimulus,
    transformed_dataset,
    upscale_to_height,
    write_transformed_dataset,
)
from countgym.stimulus import Dataset, Stimulus, write_manifest


@pytest.fixture(autouse=True)
def _derived_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(tmp_path / "derived"))


def _asym(size: tuple[int, int] = (120, 80)) -> tuple[Image.Image, list[tuple[float, float]]]:
    """An image with three distinct single-pixel marks at known continuous centres."""
    im = Image.new("RGB", size, "white")
    pts = [(10.5, 20.5), (100.5, 5.5), (60.5, 70.5)]
    for (x, y), colour in zip(pts, ["red", "green", "blue"], strict=True):
        im.putpixel((int(x), int(y)), ImageColor.getrgb(colour))
    return im, pts


@pytest.mark.parametrize("op", [rotate180, mirror])
def test_points_follow_the_pixels(op) -> None:  # noqa: ANN001 - a transform function
    im, pts = _asym()
    out, moved = op(im, pts)
    assert out.size == im.size and moved is not None
    for (x0, y0), (x1, y1) in zip(pts, moved, strict=True):
        assert out.getpixel((int(x1), int(y1))) == im.getpixel((int(x0), int(y0)))
    twice, back = op(out, moved)
    assert np.array_equal(np.asarray(twice), np.asarray(im)) and np.allclose(back, pts)


def test_resize_and_upscale_scale_points_per_axis() -> None:
    big, pts = fit_long_side(Image.new("RGB", (2048, 1000)), [(2048.0, 1000.0), (1024.0, 500.0)])
    assert big.size == (1024, 500) and np.allclose(pts, [(1024, 500), (512, 250)])
    small, same = fit_long_side(Image.new("RGB", (300, 200)), [(1.0, 2.0)])
    assert small.size == (300, 200) and same == [(1.0, 2.0)]
    up, pts = upscale_to_height(Image.new("RGB", (513, 384)), [(513.0, 384.0), (10.0, 20.0)])
    assert up.size == (1026, 768) and np.allclose(pts, [(1026, 768), (20, 40)])
    assert transform_box([10, 20, 30, 40], "rot180", (100, 100)) == [70, 60, 90, 80]
    assert transform_points([(0, 0)], "mirror", (50, 10)) == [(50.0, 0.0)]
    with pytest.raises(UserError, match="unknown transform"):
        transform_points([(0, 0)], "rot90", (1, 1))


def test_stimulus_meta_and_ids() -> None:
    im, pts = _asym()
    s = Stimulus(id="a", n=3, obj="dots", obj_sing="dot", image="images/a.png", points=pts,
                 meta={"cells": [list(p) for p in pts], "bbox": [0, 0, 10, 20], "set": "x"})
    new, _ = transform_stimulus(s, im, "rot180")
    assert new.id == "a-rot180" and new.image == "images/a-rot180.png"
    assert new.meta["transform"] == "rot180" and new.meta["transform_of"] == "a" and new.meta["set"] == "x"
    assert np.allclose(new.meta["cells"], new.points) and new.meta["bbox"] == [110, 60, 120, 80]
    assert "transform" not in s.meta  # the original is untouched


def _oracle_scores(dataset: str, out: Path) -> pd.Series:
    from countgym.analysis import load_episodes, summarize
    from countgym.runner import CellSpec, run_cell

    res = run_cell(CellSpec(dataset=dataset, agent="oracle"), out, progress=False)
    assert res.errors == 0 and res.ran > 0
    return summarize(load_episodes([out]), n_resamples=50).iloc[0]


@pytest.mark.parametrize("kind", ["rot180", "mirror"])
def test_oracle_stays_perfect_on_dots(tiny_dataset: Dataset, tmp_path: Path, kind: str) -> None:
    folder = write_transformed_dataset(tiny_dataset, tmp_path / kind, kind, progress=False)
    ds = Dataset(folder)
    assert ds.ids() == [f"{i}-{kind}" for i in tiny_dataset.ids()]
    assert all(s.meta["transform_of"] == s.id.rsplit("-", 1)[0] for s in ds)
    s = _oracle_scores(str(folder), tmp_path / "runs")
    assert s["em"] == 1.0 and s["on_target_per100"] == pytest.approx(100.0) and s["phantom_per100"] == 0


def test_oracle_stays_perfect_on_lattices_and_wide_images(wide_dataset: Dataset, tmp_path: Path) -> None:
    from countgym.scenes.batteries import cached_battery

    lattice = Dataset(cached_battery("lattice", progress=False))
    part = tmp_path / "lattice-part"
    (part / "images").mkdir(parents=True)
    picked = lattice.stimuli[::15]  # one of each kind and several sizes
    for st in picked:
        lattice.load_image(st).save(part / st.image)
    write_manifest(part, picked)
    rot = Dataset(write_transformed_dataset(part, tmp_path / "lat-rot", "rot180", progress=False))
    for a, b in zip(picked, rot, strict=True):
        w, h = lattice.load_image(a).size
        assert np.allclose(b.meta["cells"], [(w - x, h - y) for x, y in a.meta["cells"]])
    assert _oracle_scores(str(rot.root), tmp_path / "r1")["on_target_per100"] == pytest.approx(100.0)
    # a 2048 x 1024 image is fitted by the env; the mirrored copy too
    mir = write_transformed_dataset(wide_dataset, tmp_path / "wide-mirror", "mirror", progress=False)
    s = _oracle_scores(str(mir), tmp_path / "r2")
    assert s["em"] == 1.0 and s["on_target_per100"] == pytest.approx(100.0)
    res = write_transformed_dataset(wide_dataset, tmp_path / "wide-r1024", "resize1024", progress=False)
    assert Dataset(res).load_image(Dataset(res).stimuli[0]).size == (1024, 512)
    assert _oracle_scores(str(res), tmp_path / "r3")["on_target_per100"] == pytest.approx(100.0)


@pytest.mark.slow
def test_oracle_stays_perfect_on_rotated_photos(tmp_path: Path) -> None:
    from countgym.scenes.photos import prepare_fsc147
    from tests.test_photos_fixtures import make_fsc147_release

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fsc = prepare_fsc147(make_fsc147_release(tmp_path / "rel"), tmp_path / "fsc", progress=False)
    for kind in ("rot180", "mirror"):
        folder = write_transformed_dataset(fsc, tmp_path / f"fsc-{kind}", kind, progress=False)
        s = _oracle_scores(str(folder), tmp_path / f"runs-{kind}")
        assert s["em"] == 1.0 and s["on_target_per100"] == pytest.approx(100.0)


def test_analysis_pairs_original_and_rotated(tiny_dataset: Dataset, tmp_path: Path) -> None:
    from countgym.analysis.tables import write_audit_files
    from countgym.runner import CellSpec, run_cell

    rot = write_transformed_dataset(tiny_dataset, tmp_path / "rot", "rot180", progress=False)
    for ds in (str(tiny_dataset.root), str(rot)):
        run_cell(CellSpec(dataset=ds, agent="oracle", repeats=2), tmp_path / "runs", progress=False)
    files = write_audit_files([tmp_path / "runs"], tmp_path / "audit", n_resamples=50, report=False)
    table = pd.read_csv(files.tables["transform_consistency"])
    row = table.iloc[0]
    assert row["transform"] == "rot180" and row["n_stimuli"] == 3
    assert row["agreement"] == 1.0 and row["effect"] == 0.0


def test_mask_is_transformed_too(tmp_path: Path) -> None:
    root = tmp_path / "cf"
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    Image.new("RGB", (40, 20), "white").save(root / "images/a.png")
    m = Image.new("L", (40, 20), 0)
    m.putpixel((1, 2), 255)
    m.save(root / "masks/a.png")
    write_manifest(root, [Stimulus(id="a", n=1, obj="legs", obj_sing="leg", image="images/a.png",
                                   meta={"mask": "masks/a.png", "bbox": [0, 0, 4, 4]})])
    out = Dataset(write_transformed_dataset(root, tmp_path / "out", "mirror", progress=False))
    s = out.stimuli[0]
    with Image.open(out.root / s.meta["mask"]) as mm:
        assert mm.getpixel((38, 2)) == 255
    assert s.meta["bbox"] == [36, 0, 40, 4]


def test_cached_copy_is_built_once_and_named(tiny_dataset: Dataset) -> None:
    a = transformed_dataset(tiny_dataset, "mirror")
    b = transformed_dataset(tiny_dataset, "mirror")
    assert a.root == b.root and a.name == f"{tiny_dataset.name}+mirror" and len(a) == len(tiny_dataset)
    assert split_transform("dotarrays:ablation+rot180") == ("dotarrays:ablation", "rot180")
    assert split_transform("x+y") == ("x+y", None)


@pytest.mark.slow
def test_resolve_transformed_folder_name(tiny_dataset: Dataset) -> None:
    from countgym.scenes import resolve_dataset

    ds = resolve_dataset(f"{tiny_dataset.root}+rot180")
    assert ds is not None and ds.ids() == [f"{i}-rot180" for i in tiny_dataset.ids()]
    sub = resolve_dataset("dotarrays:ablation+mirror")
    assert sub is not None and len(sub) == 68 and all(s.meta["transform"] == "mirror" for s in sub)
