"""Schema version 2: version-1 logs (written before the optional fields of version 2) still read,
resume without re-running an episode, and audit."""

from __future__ import annotations

import json
from pathlib import Path

from countgym.analysis.tables import write_audit_files
from countgym.logs import SCHEMA_VERSION, read_records
from countgym.runner import CellSpec, run_cell

VERSION_2_FIELDS = ("env", "extracted_by")
STEP_FIELDS = ("reply_chars", "reply_sha256", "tool_calls")


def _as_version_1(line: str) -> str:
    """A record as countgym wrote it before version 2: no version-2 fields, version 1."""
    d = json.loads(line)
    d["schema_version"] = 1
    for k in VERSION_2_FIELDS:
        d.pop(k, None)
    d["arm"].pop("defaults", None)
    for s in d["steps"]:
        for k in STEP_FIELDS:
            s.pop(k, None)
    return json.dumps(d)


def test_version_1_logs_read_resume_and_audit(tmp_path: Path, tiny_dataset) -> None:
    assert SCHEMA_VERSION == 3
    spec = CellSpec(dataset=str(tiny_dataset.root), agent="oracle")
    res = run_cell(spec, tmp_path / "runs", progress=False)
    assert res.ran == 3
    old = [_as_version_1(x) for x in res.log.read_text().splitlines()]
    res.log.write_text("\n".join(old) + "\n")
    recs = read_records([res.log])
    assert len(recs) == 3 and {r.schema_version for r in recs} == {3}
    assert all(r.extracted_by is None and r.arm.defaults is None for r in recs)
    again = run_cell(spec, tmp_path / "runs", progress=False)
    assert (again.ran, again.skipped) == (0, 3)  # nothing re-run, nothing duplicated
    files = write_audit_files([tmp_path / "runs"], tmp_path / "audit")
    assert files.report.is_file()
    written = json.loads(res.log.read_text().splitlines()[0])
    assert written["schema_version"] == 1  # reading never rewrites a log
