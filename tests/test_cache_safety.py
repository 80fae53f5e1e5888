"""``countgym cache`` never deletes what countgym did not build: a cache root without countgym's
marker is refused, and inside a marked root only entries with countgym's build marks go."""

from __future__ import annotations

from pathlib import Path

import pytest

from countgym.cli import main
from countgym.scenes.cache import build_once
from countgym.scenes.cache_marks import BUILD_MARKER, LOCK_TEXT, ROOT_MARKER

SUBCOMMANDS = [
    ["cache"], ["cache", "list"], ["cache", "clean"], ["cache", "clean", "--dry-run"],
    ["cache", "clean", "--partial"], ["cache", "clean", "--all"], ["cache", "clean", "Documents"],
    ["cache", "clean", "thesis"], ["cache", "clean", ".notes.lock"],
]


def _fake_home(home: Path) -> None:
    """A user's home: documents, code, a thesis, and files that look like cache leftovers."""
    files = {
        "Documents/report.txt": b"quarterly report",
        "Documents/taxes/2025.pdf": b"%PDF",
        "projects/app/main.py": b"print('hi')",
        "projects/app/.git/HEAD": b"ref: refs/heads/main",
        "work/thesis/chapter1.tex": b"\\chapter{One}",
        "work/thesis/data/manifest.txt": b"not a dataset",
        "mydata/manifest.jsonl": b'{"id": "mine"}\n',  # a user's own dataset folder
        ".notes.lock": b"",  # user files named like lock files
        ".dotarrays-v2.lock": b"my lock",
        ".editor.abc123.tmp/draft.txt": b"unsaved draft",  # user folders named like temp builds
        ".dotarrays-v2.zz.tmp/keep.txt": b"mine too",
        ".backup.partial/old.txt": b"backup",
        "countvideo-v1-k2-960x540/notes.txt": b"a folder with a build's name",
        "transforms/stuff.txt": b"derived-looking",
        "fitted/photo.png": b"\x89PNG",
        "fitted/" + "a" * 40 + ".png": b"\x89PNG named like a fitted copy",
    }
    for rel, data in files.items():
        p = home / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("layout", ["cache", "both", "derived"])
def test_every_user_file_survives_every_cache_subcommand(tmp_path: Path, monkeypatch, capsys, layout: str) -> None:
    home = tmp_path / "home"
    _fake_home(home)
    before = _snapshot(home)
    cache = home if layout in ("cache", "both") else tmp_path / "elsewhere"
    monkeypatch.setenv("COUNTGYM_CACHE", str(cache))
    if layout == "cache":
        monkeypatch.delenv("COUNTGYM_DERIVED_CACHE", raising=False)
    else:
        monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(home))
    for argv in SUBCOMMANDS:
        rc = main(argv)
        out = capsys.readouterr()
        if argv[:2] == ["cache", "clean"]:
            assert rc == 2, argv
            lines = out.err.strip().splitlines()
            assert len(lines) == 1 and "countgym did not make" in lines[0] and "point COUNTGYM_" in lines[0]
            assert str(home) in lines[0] and "Traceback" not in out.err
        else:
            assert rc == 0, argv
            assert "countgym cache clean" not in out.out.replace("`countgym cache clean` will not", "")
            assert "Documents" not in out.out and "thesis" not in out.out and "fitted" not in out.out
        assert _snapshot(home) == before, argv
    assert not (home / ROOT_MARKER).exists()


def test_a_build_into_a_home_folder_leaves_it_unmarked_and_clean_still_refuses(tmp_path: Path, monkeypatch,
                                                                                 capsys) -> None:
    home = tmp_path / "home"
    _fake_home(home)
    monkeypatch.setenv("COUNTGYM_CACHE", str(home))
    monkeypatch.setenv("COUNTGYM_DERIVED_CACHE", str(tmp_path / "derived"))

    def build(tmp: Path) -> None:
        (tmp / "manifest.jsonl").write_text('{"id": "a"}\n')

    built = build_once(home / "lattice-v1", build)
    assert (built / BUILD_MARKER).is_file() and not (home / ROOT_MARKER).exists()
    before = _snapshot(home)
    assert main(["cache", "clean", "--all"]) == 2
    assert _snapshot(home) == before


def _marked_cache(root: Path) -> None:
    def build(tmp: Path) -> None:
        (tmp / "manifest.jsonl").write_text('{"id": "a"}\n')

    build_once(root / "dotarrays-v2", build)
    assert (root / ROOT_MARKER).is_file()
    stale = root / ".lattice-v1.k3.tmp"
    stale.mkdir()
    (stale / BUILD_MARKER).write_text("")
    (root / ".lattice-v1.lock").write_text(LOCK_TEXT)
    partial = root / ".countvideo-v3-all-1920x1080.partial"
    partial.mkdir()
    (partial / BUILD_MARKER).write_text("")


def test_in_a_marked_cache_only_countgyms_builds_go(tmp_path: Path, monkeypatch, capsys) -> None:
    """The second guard: a user who drops files into a real cache keeps them."""
    root = tmp_path / "cache"
    _marked_cache(root)
    _fake_home(root)  # the same look-alikes, now inside a marked root
    user = {k: v for k, v in _snapshot(root).items() if not k.startswith(("dotarrays-v2", ".lattice-v1.k3",
                                                                          ".countvideo-v3", ".lattice-v1.lock"))
            and k not in (ROOT_MARKER, "derived")}
    monkeypatch.setenv("COUNTGYM_CACHE", str(root))
    monkeypatch.delenv("COUNTGYM_DERIVED_CACHE", raising=False)
    assert main(["cache"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert listed == {"dotarrays-v2", ".lattice-v1.k3.tmp", ".lattice-v1.lock", ".countvideo-v3-all-1920x1080.partial"}
    assert main(["cache", "clean"]) == 0
    assert not (root / ".lattice-v1.k3.tmp").exists() and not (root / ".lattice-v1.lock").exists()
    assert main(["cache", "clean", "--partial"]) == 0
    assert not (root / ".countvideo-v3-all-1920x1080.partial").exists()
    assert main(["cache", "clean", "--all"]) == 0
    assert not (root / "dotarrays-v2").exists()
    after = _snapshot(root)
    assert all(after.get(k, "gone") == v for k, v in user.items()), sorted(set(user) - set(after))
    assert main(["cache", "clean", "mydata"]) == 2  # not an entry


def test_an_old_countgym_cache_is_adopted_and_cleaned(tmp_path: Path, monkeypatch, capsys) -> None:
    """A cache from before the markers, holding only countgym's builds, gets them on first use."""
    root = tmp_path / "cache"
    (root / "dotarrays-v2").mkdir(parents=True)
    (root / "dotarrays-v2" / "manifest.jsonl").write_text('{"id": "a"}\n')
    (root / ".countvideo-v1-all-1920x1080.k3j2.tmp").mkdir()
    (root / ".countvideo-v1-all-1920x1080.lock").write_text("")
    (root / "derived" / "fitted").mkdir(parents=True)
    (root / "derived" / "fitted" / ("b" * 40 + ".png")).write_bytes(b"z")
    sent = root / "derived" / "sent"
    sent.mkdir()
    (sent / ("c" * 40)).write_bytes(b"")  # a checked PNG
    (sent / ("d" * 40)).symlink_to("jpeg 96 96 0 20 64 9619")  # a JPEG's verdict
    monkeypatch.setenv("COUNTGYM_CACHE", str(root))
    monkeypatch.delenv("COUNTGYM_DERIVED_CACHE", raising=False)
    assert main(["cache", "clean"]) == 0
    assert (root / ROOT_MARKER).is_file() and (root / "derived" / ROOT_MARKER).is_file()
    assert not (root / ".countvideo-v1-all-1920x1080.k3j2.tmp").exists()
    assert not (root / ".countvideo-v1-all-1920x1080.lock").exists()
    assert main(["cache", "clean", "--all"]) == 0
    assert not (root / "dotarrays-v2").exists() and not (root / "derived" / "fitted" / ("b" * 40 + ".png")).exists()
    assert not [p for p in sent.iterdir() if not p.name.startswith(".")]


def test_an_old_cache_with_a_foreign_folder_is_refused_whole(tmp_path: Path, monkeypatch, capsys) -> None:
    root = tmp_path / "cache"
    (root / "dotarrays-v2").mkdir(parents=True)
    (root / "dotarrays-v2" / "manifest.jsonl").write_text('{"id": "a"}\n')
    (root / "holiday photos").mkdir()
    monkeypatch.setenv("COUNTGYM_CACHE", str(root))
    monkeypatch.delenv("COUNTGYM_DERIVED_CACHE", raising=False)
    before = _snapshot(root)
    assert main(["cache", "clean", "--all"]) == 2
    assert "no .countgym-cache marker" in capsys.readouterr().err
    assert _snapshot(root) == before
