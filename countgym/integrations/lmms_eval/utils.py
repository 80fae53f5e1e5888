"""lmms-eval hooks for countgym's task package (``countgym.integrations.lmms_eval``).

Each document is one stimulus prepared by ``python -m countgym.integrations.lmms_tasks``: its
media files, the question countgym's environment asks for the arm, and where to find the
stimulus again for scoring. ``process_results`` steps a fresh countgym environment with the
model's reply (countgym's own answer extraction) and audits the episode; the aggregations give
the audit's metrics (``em``, ``mae``; see ``countgym.integrations.evalshape``).
"""

from __future__ import annotations

from typing import Any

from countgym.integrations.lmms_tasks import (
    aggregate,
    doc_to_messages,
    doc_to_text,
    doc_to_visual,
    score_reply,
)


def countgym_doc_to_visual(doc: dict[str, Any]) -> list[Any]:
    return doc_to_visual(doc)


def countgym_doc_to_text(doc: dict[str, Any], lmms_eval_specific_kwargs: dict[str, Any] | None = None) -> str:
    return doc_to_text(doc, lmms_eval_specific_kwargs)


def countgym_doc_to_messages(doc: dict[str, Any], lmms_eval_specific_kwargs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return doc_to_messages(doc, lmms_eval_specific_kwargs)


def countgym_doc_to_target(doc: dict[str, Any]) -> str:
    return str(doc["n"])


def countgym_process_results(doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
    values = score_reply(doc, results[0] if results else "")
    return {"em": values, "mae": values}


def countgym_em(items: list[dict[str, Any]]) -> float:
    return aggregate(items, "em")


def countgym_mae(items: list[dict[str, Any]]) -> float:
    return aggregate(items, "mae")
