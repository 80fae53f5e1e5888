"""countgym sweep: config validation, grid expansion, resume and the sweep-wide spend cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from countgym.cli import main
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
    # oracle: 2 datasets x 2 budgets (models ignored; verification changes nothing a scripted
    # policy does); tag: 2 datasets x 2 models x 2 budgets x 2 ablations; direct: budgets and
    # verification do not apply to a single-call arm, so one cell per dataset and model.
    notes: list[str] = []
    cells = expand(cfg, notes=notes)
    assert len(cells) == 2 * 2 + 2 * 2 * 2 * 2 + 2 * 2
    assert len([c for c in cells if c.agent == "direct"]) == 4
    assert [n for n in notes if " to direct " in n] == [
        "note: budgets, ablation verify do not apply to direct on the image task (nothing it sends or does "
        "would change): no cell per value for it there"]
    assert any(" to oracle " in n and "ablation verify" in n and "budgets" not in n for n in notes)
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


@pytest.mark.parametrize(("text", "needle"), [
    ('datasets = ["lattice"]\narms = ["oracle"]\ntool_set = [["tag"]]\n',
     "unknown key 'tool_set' (did you mean 'tool_sets'?)"),
    ('datasets = ["lattice"]\narms = ["oracle"]\nbudget = [4]\n', "unknown key 'budget' (did you mean 'budgets'?)"),
    ('datasets = ["lattice"]\narms = ["oracle"]\nlimt = 3\n', "unknown key 'limt' (did you mean 'limit'?)"),
    ('datasets = ["lattice"]\narms = ["oracle"]\nagent_option = {}\n',
     "unknown key 'agent_option' (did you mean 'agent_options'?)"),
    ('envs = [{id = "countgym/Lattice-v0", datset = "lattice"}]\narms = ["oracle"]\n',
     "envs.0: unknown key 'datset' (did you mean 'dataset'?)"),
    ('datasets = ["lattice"]\narms = ["tag"]\nmodels = ["m"]\nablations = [{}, {verfy = false}]\n',
     "ablations.1: unknown key 'verfy' (did you mean 'verify'?)"),
    ('datasets = ["lattice"]\narms = ["tag"]\nmodels = ["m"]\n[agent_options.tga]\nx = 1\n',
     "agent_options: 'tga' is not one of the sweep's arms (did you mean 'tag'?)"),
    ('datasets = ["lattice"]\narms = ["tag"]\nmodels = ["openai/a"]\n[model_options."openai/b"]\nx = 1\n',
     "model_options: 'openai/b' is not one of the sweep's models (did you mean 'openai/a'?)"),
])
def test_sweep_key_typos_get_a_did_you_mean(tmp_path: Path, capsys: pytest.CaptureFixture, text: str,
                                            needle: str) -> None:
    assert main(["sweep", str(write(tmp_path, "s.toml", text)), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_every_sweep_key_is_documented() -> None:
    from countgym.sweep import EnvSource, SweepConfig

    doc = (Path(__file__).parents[1] / "docs" / "sweeps.md").read_text()
    for key in [*SweepConfig.model_fields, *EnvSource.model_fields]:
        assert f"`{key}`" in doc, key


def test_the_documented_example_sweep_loads(tmp_path: Path) -> None:
    import re

    doc = (Path(__file__).parents[1] / "docs" / "sweeps.md").read_text()
    (example,) = re.findall(r"```toml\n(.*?)```", doc, flags=re.S)[:1]
    cfg = load_config(write(tmp_path, "example.toml", example))
    assert cfg.tool_sets and cfg.budgets and cfg.limit and cfg.agent_options and cfg.model_options
    assert len(expand(cfg)) > 1
