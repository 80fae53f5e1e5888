"""Every paper-reproduction config in configs/ runs end to end against the local test server.

Each config is loaded unchanged with ``load_config``; the test overrides only ``out``,
``limit`` (1), ``models`` (``openai/blob``) and ``model_options`` (the server's ``api_base``).
Datasets that need a download are substituted by tiny fixtures in the official formats
(``$COUNTGYM_FSC147_ROOT``, ``$COUNTGYM_PIXMO_ROOT``), the 2,600-video ``countvideo`` battery
by two small generated videos and the ``countercount`` battery by its first two pairs. After the
sweep, the audit must write the report section the config exists for.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from countgym.analysis.tables import write_audit_files
from countgym.analysis.viewer import ViewerOptions
from countgym.logs import read_records
from countgym.sweep import ABLATION_KEYS, load_config, run_sweep
from countgym.testing.server import TestServer
from tests.test_photos_fixtures import (
    ensure_photo_resolver,
    make_fsc147_release,
    make_pixmo_release,
)

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
CONFIGS = sorted(CONFIG_DIR.glob("*.toml"))
MODEL = "openai/blob"


@dataclass(frozen=True)
class Expect:
    """What the audit of one config must contain."""

    tables: tuple[str, ...] = ("summary",)
    """CSV tables that must exist and be non-empty."""
    sections: tuple[str, ...] = ('id="summary"',)
    """Fragments of report.html (section anchors)."""
    arms: tuple[str, ...] = ()
    """Regexes each matching some arm label in summary.csv."""
    extra: dict[str, str] = field(default_factory=dict)
    """table -> regex that some cell of that table must match."""
    variants: int = 0
    """Distinct arm labels summary.csv must hold at least."""
    option: tuple[str, object] | None = None
    """(key, value) some logged episode's arm options must hold."""


_ARMS_REPORT = ('id="summary"', 'id="contrasts"', 'id="arms"')
# Arm labels are the analysis's (e.g. "direct[verify=False]"); match on the arm name.
EXPECTED: dict[str, Expect] = {
    "finger-tier1": Expect(("summary", "contrasts", "accuracy_by_n", "tags_vs_direct"),
                           (*_ARMS_REPORT, 'id="range"'), (r"^direct\b", r"^tiles\b", r"^tag\+crop\b")),
    "finger-tier2": Expect(("summary", "contrasts", "accuracy_by_n"), _ARMS_REPORT, (r"^list\b", r"^full\b")),
    "finger-tier3": Expect(("summary", "contrasts"), _ARMS_REPORT, (r"^cot\b", r"^full\b")),
    "finger-table1-arms": Expect(("summary", "contrasts", "tags_vs_direct"), _ARMS_REPORT,
                                 (r"^list\b", r"^tiles\b", r"^tag\+crop\b")),
    "finger-ablation-verify-marks": Expect(("summary", "contrasts"), _ARMS_REPORT,
                                           ("verify=False", "numbered=False"), variants=3),
    # one of the four variants is the reference and keeps the bare name "tag"
    "finger-ablation-tools": Expect(("summary", "contrasts"), _ARMS_REPORT, ("tools=",), variants=4),
    "finger-ablation-budget": Expect(("summary", "contrasts"), _ARMS_REPORT, ("budget=",), variants=3),
    "finger-order": Expect(("traversal", "order_effect"), ('id="principles"', 'id="p-order_effect"')),
    "finger-rotation": Expect(("transform_consistency",), ('id="p-transform_consistency"',),
                              extra={"transform_consistency": "^rot180$"}),
    "finger-mirror": Expect(("transform_consistency",), ('id="p-transform_consistency"',),
                            extra={"transform_consistency": "^mirror$"}),
    "finger-perturbation": Expect(("perturbation",), ('id="p-perturbation"',), ("perturb=remove", "perturb=add")),
    "finger-tag1": Expect(("summary", "contrasts"), _ARMS_REPORT, (r"^tag-1\b",)),
    "finger-xl": Expect(("summary", "accuracy_by_n"), ('id="range"', "accuracy_vs_n")),
    "finger-lattice": Expect(("lattice",), ('id="p-lattice"',)),
    "finger-thinking-off": Expect(("summary", "contrasts"), _ARMS_REPORT, (r"^direct\b",), variants=2,
                                  option=("thinking", False)),
    "countvideo-main": Expect((), ('id="countvideo"',)),
    "countvideo-prompts": Expect((), ('id="countvideo"', "video-p3")),
    "countercount-baseline": Expect((), ('id="countercount"',)),
    "countercount-generic": Expect((), ('id="countercount"', "generic")),
    "countercount-blur": Expect((), ('id="countercount"', "blur")),
    "countercount-blur-sweep": Expect((), ('id="countercount"', "blur")),
    "countercount-cue": Expect((), ('id="countercount"', "cue")),
    "countercount-thinking": Expect((), ('id="countercount"', "think")),
}


def _skip_reason(name: str) -> str | None:
    if name.startswith("countvideo-"):
        from countgym.tasks import TASKS

        if (importlib.util.find_spec("countgym.agents.video_arm") is None or "video" not in TASKS
                or not hasattr(importlib.import_module("countgym.scenes.video"), "cached_countvideo")):
            return ("CountVideoBench is not wired yet (agents/video_arm.py and the 'video' task in "
                    "countgym/tasks.py); the config targets battery 'countvideo' and arms video-p1..p3")
    if name == "countercount-blur-sweep" and not {"blur_radius", "feather"} <= ABLATION_KEYS:
        return ("countgym.sweep.ABLATION_KEYS lacks 'blur_radius'/'feather' (accepted by "
                "cell_env_options for CounterCount arms); add them to run the blur sweep")
    return None


@pytest.fixture(scope="module")
def server() -> Iterator[TestServer]:
    with TestServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("config_releases")
    return {"fsc147": make_fsc147_release(base / "fsc"), "pixmo": make_pixmo_release(base / "pixmo")}


@pytest.fixture(scope="module")
def tiny_countvideo(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """Two quarter-size videos standing in for the 2,600 of the ``countvideo`` battery."""
    if importlib.util.find_spec("countgym.scenes.video") is None:
        return None
    video = importlib.import_module("countgym.scenes.video")
    if not hasattr(video, "make_countvideo"):
        return None
    return video.make_countvideo(tmp_path_factory.mktemp("countvideo"), limit=2, size="quarter",
                                 progress=False, workers=1)


@pytest.fixture(autouse=True)
def _data(releases: dict[str, Path], tiny_countvideo: Path | None, tiny_countercount: Path,
          tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUNTGYM_FSC147_ROOT", str(releases["fsc147"]))
    monkeypatch.setenv("COUNTGYM_PIXMO_ROOT", str(releases["pixmo"]))
    # one derived cache for the module: photo sets and transformed copies are built once
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(tmp_path_factory.getbasetemp() / "config_derived"))
    ensure_photo_resolver(monkeypatch)
    if tiny_countvideo is not None:
        # rendering the whole battery (26,000 frames) is no unit test: the battery name resolves
        # to the tiny set instead, for the sweep and the audit alike
        monkeypatch.setattr("countgym.scenes.video.cached_countvideo", lambda **_: tiny_countvideo)
    # Likewise the 214-image CounterCount battery (about 9 s to draw): a config runs one pair
    # per cell, and the first pairs of the same design stand in for it
    monkeypatch.setattr("countgym.scenes.counterfactual.generator.cached_countercount", lambda **_: tiny_countercount)


def test_every_config_has_an_expectation() -> None:
    assert CONFIGS, "configs/ is empty"
    assert {p.stem for p in CONFIGS} == set(EXPECTED)
    for p in CONFIGS:
        text = p.read_text()
        assert f"countgym sweep configs/{p.name}" in text, f"{p.name}: no command line in its header"
        assert "Report:" in text and "REPLACE:" in text, f"{p.name}: header must name its report and models"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:FSC-147 bin", "ignore:PixMo-Count count")
@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_runs_and_reports(path: Path, server: TestServer, tmp_path: Path) -> None:
    reason = _skip_reason(path.stem)
    if reason:
        pytest.skip(reason)
    cfg = load_config(path)
    assert all(m.startswith("REPLACE:") for m in cfg.models)  # placeholders, never a live model
    cfg = cfg.model_copy(update={
        "out": str(tmp_path / "runs"), "limit": 1, "models": [MODEL],
        "model_options": {MODEL: {"api_base": server.base_url}},
    })  # fmt: skip
    results = run_sweep(cfg, progress=False)
    assert results and all(r.errors == 0 for r in results), [m for r in results for m in r.error_messages]
    # limit 1 per cell: one stimulus, or one whole factual/CF pair on CounterCount
    per_cell = 2 if path.stem.startswith("countercount") else 1
    assert sum(r.ran for r in results) == len(results) * per_cell * cfg.repeats
    files = write_audit_files([tmp_path / "runs"], tmp_path / "audit", n_resamples=100,
                              viewer=ViewerOptions(max_episodes=2))
    want = EXPECTED[path.stem]
    for name in want.tables:
        assert name in files.tables, f"{path.name}: no {name}.csv"
        assert not pd.read_csv(files.tables[name]).empty, f"{path.name}: {name}.csv is empty"
    assert files.report is not None
    html = files.report.read_text()
    for frag in want.sections:
        assert frag in html, f"{path.name}: report lacks {frag!r}"
    if want.arms:
        labels = pd.read_csv(files.tables["summary"])["arm"].astype(str).tolist()
        for pat in want.arms:
            assert any(re.search(pat, lab) for lab in labels), f"{path.name}: no arm like {pat!r} in {labels}"
    if want.variants:
        assert pd.read_csv(files.tables["summary"])["arm"].nunique() >= want.variants
    if want.option is not None:
        key, value = want.option
        assert any(r.arm.options.get(key) == value for r in read_records([tmp_path / "runs"]))
    for name, pat in want.extra.items():
        cells = pd.read_csv(files.tables[name]).astype(str).to_numpy().ravel()
        assert any(re.search(pat, c) for c in cells), f"{path.name}: {name}.csv has nothing like {pat!r}"


def test_placeholder_models_fail_fast_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    from countgym.cli import main

    cache = tmp_path / "cache"  # cold: the placeholder must be refused before any build
    monkeypatch.setenv("COUNTGYM_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", str(CONFIG_DIR / "finger-order.toml"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "REPLACE:gemini-3.1-flash-lite" in err
    assert not list(tmp_path.rglob("*.jsonl"))  # nothing ran
    assert not cache.exists() or not any(cache.iterdir())  # nothing was built


def test_a_bad_model_later_in_a_sweep_stops_it_before_the_first_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    from countgym.cli import main

    monkeypatch.setenv("COUNTGYM_CACHE", str(tmp_path / "cache"))
    cfg = tmp_path / "s.toml"
    cfg.write_text(
        f'out = "{tmp_path / "runs"}"\ndatasets = ["dotarrays:common"]\narms = ["direct"]\n'
        'models = ["openai/gpt-4o-mini", "gpt4o-typo"]\n'
    )
    assert main(["sweep", str(cfg), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'gpt4o-typo'" in err
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("*.jsonl"))


def test_sweep_without_the_release_fails_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    from countgym.cli import main

    monkeypatch.delenv("COUNTGYM_PIXMO_ROOT")
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'out = "{tmp_path / "runs"}"\ndatasets = ["pixmo:common"]\narms = ["oracle"]\n')
    assert main(["sweep", str(cfg), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "COUNTGYM_PIXMO_ROOT" in err and "huggingface.co/datasets/allenai/pixmo-count" in err
