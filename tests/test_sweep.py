"""countgym sweep: config validation, grid expansion, resume and the sweep-wide spend cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from countgym.cli import main
from countgym.errors import UserError
from countgym.logs import read_records
from countgym.sweep import expand, load_config, run_sweep

PLUGINS = str(Path(__file__).parent / "plugins")


@pytest.fixture(autouse=True)
def _plugins_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(PLUGINS)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_grid_expansion_counts_and_options(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "s.toml", f'''
out = "{tmp_path / 'runs'}"
datasets = ["dotarrays:common", "lattice"]
arms = ["oracle", "tag", "direct"]
models = ["openai/a", "openai/b"]
budgets = [4, 8]
ablations = [{{}}, {{verify = false}}]
'''))
    # oracle: 2 datasets x 2 budgets x 2 ablations (models ignored); tag: x 2 models; direct:
    # verification and budget changes do not apply to a single-call arm -> configuration error.
    with pytest.raises(UserError, match="do not apply to arm 'direct'"):
        expand(cfg)
    cells = expand(cfg.model_copy(update={"arms": ["oracle", "tag"]}))
    assert len(cells) == 2 * 2 * 2 + 2 * 2 * 2 * 2
    tag = [c for c in cells if c.agent == "tag" and c.env_options["budget"] == 8 and not c.env_options["verify"]]
    assert len(tag) == 4 and all(c.env_options["tools"] == ["tag"] for c in tag)
    assert len({c.log_name() for c in cells}) == len(cells)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('datasets = ["x"]\narms = ["oracle"]\nconcurency = 2\n', "concurency"),
        ('datasets = []\narms = ["oracle"]\n', "datasets"),
        ('datasets = ["x"]\narms = ["oracle"]\nrepeats = 0\n', "repeats"),
        ('datasets = ["x"]\narms = ["oracle"]\nablations = [{colour = "red"}]\n', "colour"),
        ('datasets = ["x"\n', "cannot parse"),
    ],
)
def test_config_mistakes_are_one_line(tmp_path: Path, text: str, needle: str, capsys: pytest.CaptureFixture) -> None:
    p = write(tmp_path, "bad.toml", text)
    assert main(["sweep", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_yaml_sweep_runs_and_resumes(tiny_dataset, tmp_path: Path) -> None:
    p = write(tmp_path, "s.yaml", f"""
out: {tmp_path / 'runs'}
datasets: [{tiny_dataset.root}]
arms: [oracle, blob-counter, "outside_policy:CentreTagger"]
repeats: 2
""")
    res = run_sweep(load_config(p), progress=False)
    assert [r.ran for r in res] == [6, 6, 6]
    assert len(read_records([tmp_path / "runs"])) == 18
    again = run_sweep(load_config(p), progress=False)
    assert [r.ran for r in again] == [0, 0, 0]


def test_sweep_spend_cap(tiny_dataset, tmp_path: Path) -> None:
    p = write(tmp_path, "s.toml", f'''
out = "{tmp_path / 'runs'}"
datasets = ["{tiny_dataset.root}"]
arms = ["outside_policy:Costly", "outside_policy:CentreTagger"]
ablations = [{{}}, {{verify = false}}]
repeats = 3
max_cost = 0.55
''')
    res = run_sweep(load_config(p), progress=False)
    recs = read_records([tmp_path / "runs"])
    cost = sum(s.cost or 0 for r in recs for s in r.steps)
    # Episodes stop starting once $0.55 is reached: 6 costly episodes ($0.60), then nothing more
    # from the second costly cell; the free cells still run.
    assert cost == pytest.approx(0.60)
    assert sum(r.stopped_by_cost for r in res) >= 1


def test_readme_sweep_example_is_valid(tmp_path: Path) -> None:
    import re

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = re.search(r"```toml\n# sweep.toml\n(.*?)```", readme, re.S).group(1)
    cfg = load_config(write(tmp_path, "sweep.toml", block))
    cells = expand(cfg)
    assert len(cells) == 3 * 2 * 3
