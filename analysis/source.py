"""A re-readable source of episode records: the log files plus each valid line's byte offset.

The full audit reads every record once, in one pass: the answer resolution, the episodes table
and the per-episode inputs of the principle tests all take their share of each record as it
goes by (hooks). The later stages that need whole records again (the perturbation probe, the
lattice offsets, the task sections, the trajectory viewer) ask for the few they use by
position or episode id, and those are read again from the file. Memory holds one position per
record, never the records (records given in memory stay the caller's list).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, overload

from countgym.logs import EpisodeRecord, LogLineError, _read_line
from countgym.secrets import known_secrets

Hook = Callable[[int, EpisodeRecord], EpisodeRecord]
"""Called once per record (its position, the record) on the first pass; returns the record
the audit uses (the same one, or a replacement that the source keeps)."""

_NEWLINE = re.compile(r"\r\n|\r|\n")  # text mode's universal newlines


def _lines(raw: bytes) -> list[str]:
    """The text lines of one binary line, as a file opened in text mode reads them."""
    text = raw.decode("utf-8", errors="replace")
    if "\r" not in text:
        return [text]
    parts = _NEWLINE.split(text)
    if parts and parts[-1] == "":
        parts.pop()
    return parts


class RecordSource(Sequence[EpisodeRecord]):
    """Episode records of in-memory records and log files, readable again by position or id.

    The first iteration reads the files (bad lines reported to ``errors`` and warned about,
    as ``countgym.logs.iter_records`` does), runs the hooks and notes where each valid record
    starts; ``len``, indexing and later iterations need that first pass done."""

    def __init__(
        self,
        records: Sequence[EpisodeRecord] = (),
        files: Sequence[Path] = (),
        errors: list[LogLineError] | None = None,
    ) -> None:
        self._records = records
        self._files = [Path(f) for f in files]
        self._errors = errors
        self._pos: list[tuple[int, int, int]] = []  # (file, byte offset, text line in it)
        self._replaced: dict[int, EpisodeRecord] = {}
        self._ids: dict[str, int] = {}
        self._hooks: list[Hook] = []
        self._scanned = False
        self._secrets = known_secrets()

    def add_hook(self, hook: Hook) -> None:
        """Run ``hook`` on every record of the first pass, in order (before ``scan``)."""
        if self._scanned:
            raise RuntimeError("the records were read already")
        self._hooks.append(hook)

    @property
    def scanned(self) -> bool:
        """Whether the first pass is done."""
        return self._scanned

    def _first_pass(self) -> Iterator[EpisodeRecord]:
        # A first pass stopped early left nothing the next one trusts: start over.
        self._pos, self._replaced, self._ids = [], {}, {}
        i = 0
        for given in self._records:
            yield self._noted(i, given)
            i += 1
        for k, path in enumerate(self._files):
            with path.open("rb") as f:
                lineno = 0
                offset = f.tell()
                for raw in f:
                    for part, line in enumerate(_lines(raw)):
                        lineno += 1
                        if not line.strip():
                            continue
                        rec, msg, _ = _read_line(line, False, self._secrets)
                        if rec is None:
                            if self._errors is not None:
                                self._errors.append(LogLineError(file=str(path), line=lineno, error=msg))
                            warnings.warn(f"{path}:{lineno}: skipped invalid log line: {msg}", stacklevel=2)
                            continue
                        self._pos.append((k, offset, part))
                        yield self._noted(i, rec)
                        i += 1
                    offset += len(raw)
        self._scanned = True

    def _noted(self, i: int, rec: EpisodeRecord) -> EpisodeRecord:
        for hook in self._hooks:
            new = hook(i, rec)
            if new is not rec:
                self._replaced[i] = rec = new
        self._ids[rec.episode_id] = i
        return rec

    def scan(self) -> None:
        """Do the first pass now (when nothing has iterated the records yet)."""
        if not self._scanned:
            for _ in self._first_pass():
                pass

    def __iter__(self) -> Iterator[EpisodeRecord]:
        if not self._scanned:
            yield from self._first_pass()
            return
        yield from self._read(range(len(self)))

    def __len__(self) -> int:
        self._need_scan()
        return len(self._records) + len(self._pos)

    @overload
    def __getitem__(self, i: int) -> EpisodeRecord: ...
    @overload
    def __getitem__(self, i: slice) -> list[EpisodeRecord]: ...
    def __getitem__(self, i: int | slice) -> EpisodeRecord | list[EpisodeRecord]:
        if isinstance(i, slice):
            return list(self._read(range(len(self))[i]))
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return next(iter(self._read([i])))

    def _need_scan(self) -> None:
        if not self._scanned:
            # A TypeError, so that list(source) before the first pass still reads it (no length yet).
            raise TypeError("RecordSource: read the records once (iterate or scan) first")

    def _read(self, positions: Iterable[int]) -> Iterator[EpisodeRecord]:
        """The records at ``positions``, read again (one open file at a time)."""
        self._need_scan()
        handles: dict[int, BinaryIO] = {}
        try:
            for i in positions:
                if i in self._replaced:
                    yield self._replaced[i]
                    continue
                if i < len(self._records):
                    yield self._records[i]
                    continue
                k, offset, part = self._pos[i - len(self._records)]
                if k not in handles:
                    for h in handles.values():
                        h.close()
                    handles = {k: self._files[k].open("rb")}
                f = handles[k]
                f.seek(offset)
                rec, msg, _ = _read_line(_lines(f.readline())[part], False, self._secrets)
                if rec is None:  # the file changed under the audit
                    raise RuntimeError(f"{self._files[k]}: log changed while it was audited ({msg})")
                yield rec
        finally:
            for h in handles.values():
                h.close()

    def view(self, positions: Sequence[int]) -> RecordView:
        """The records at ``positions`` (in that order), read when iterated."""
        return RecordView(self, list(positions))

    def by_id(self, episode_ids: Iterable[str]) -> dict[str, EpisodeRecord]:
        """``{episode id: its last record}`` for the given ids that the source holds."""
        self._need_scan()
        wanted = sorted({self._ids[e] for e in set(episode_ids) if e in self._ids})
        return {r.episode_id: r for r in self._read(wanted)}


class RecordView(Sequence[EpisodeRecord]):
    """Some records of a ``RecordSource``, by position; each iteration reads them again."""

    def __init__(self, source: RecordSource, positions: list[int]) -> None:
        self._source = source
        self._positions = positions

    def __iter__(self) -> Iterator[EpisodeRecord]:
        return self._source._read(self._positions)

    def __len__(self) -> int:
        return len(self._positions)

    @overload
    def __getitem__(self, i: int) -> EpisodeRecord: ...
    @overload
    def __getitem__(self, i: slice) -> list[EpisodeRecord]: ...
    def __getitem__(self, i: int | slice) -> EpisodeRecord | list[EpisodeRecord]:
        if isinstance(i, slice):
            return list(self._source._read(self._positions[i]))
        return next(iter(self._source._read([self._positions[i]])))


def subset(records: Sequence[EpisodeRecord], positions: Sequence[int]) -> Sequence[EpisodeRecord]:
    """The records at ``positions``: a lazy view of a ``RecordSource``, else a list."""
    if isinstance(records, RecordSource):
        return records.view(positions)
    return [records[i] for i in positions]


def records_by_id(records: Iterable[EpisodeRecord], episode_ids: Iterable[str]) -> dict[str, EpisodeRecord]:
    """``{episode id: its last record}`` for ``episode_ids``, reading only those from a source."""
    if isinstance(records, RecordSource):
        return records.by_id(episode_ids)
    wanted = set(episode_ids)
    return {r.episode_id: r for r in records if r.episode_id in wanted}
