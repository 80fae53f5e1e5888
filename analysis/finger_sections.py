"""Report sections of the Finger tables the audit adds: Table 15 (FSC-147 by count bin) and
Table 21 (hidden reasoning tokens; thinking-off control). Each section is present only when its
table has rows; the CSVs are ``fsc_bins.csv``, ``reasoning_tokens.csv`` and ``thinking_off.csv``."""

from __future__ import annotations

import pandas as pd

from .finger_tables import fsc_bins_table, reasoning_tokens_table, thinking_off_table
from .pipeline import AuditTables
from .report import ci_table, section_open


def finger_extra_tables(tables: AuditTables, *, n_resamples: int = 2000, seed: int = 0) -> dict[str, pd.DataFrame]:
    """``fsc_bins``, ``reasoning_tokens`` and ``thinking_off`` of one audit."""
    return {
        "fsc_bins": fsc_bins_table(tables.episodes, n_resamples=n_resamples, seed=seed),
        "reasoning_tokens": reasoning_tokens_table(tables.episodes),
        "thinking_off": thinking_off_table(tables.episodes, tables.contrasts, tables.summary),
    }


LABELS = {
    "count_bin": "count bin", "n_images": "images", "em": "EM", "mae": "MAE", "n_episodes": "episodes",
    "reporting_share": "reported", "reasoning_tokens_mean": "mean", "reasoning_tokens_median": "median",
    "reasoning_tokens_max": "max", "arm_on": "direct arm", "arm_off": "thinking-off arm", "n_pairs": "pairs",
    "em_on": "EM on", "em_off": "EM off", "em_change": "EM off − on", "r80_on": "R80 on", "r80_off": "R80 off",
    "reasoning_tokens_on": "reasoning tok. on", "reasoning_tokens_off": "reasoning tok. off",
}  # fmt: skip


def finger_sections(extras: dict[str, pd.DataFrame]) -> list[str]:
    """The HTML sections of the tables that have rows."""
    out = []
    fsc = extras.get("fsc_bins")
    if fsc is not None and len(fsc):
        out.append(
            section_open("fsc-bins", "FSC-147 by count bin (Finger Table 15)", "FSC-147 bins")
            + '<p class="note">Exact accuracy (unanswered = wrong; 95 % bootstrap CI over images) and '
            "MAE (answered images) per FSC-147 dataset, model, arm and count bin (8–15, 16–25, "
            '26–40, 41–60, 61–80). <span class="file">fsc_bins.csv</span></p>'
            + ci_table(fsc, labels=LABELS, table_id="fsc-bins-table")
            + "</section>"
        )
    tok = extras.get("reasoning_tokens")
    off = extras.get("thinking_off")
    has_tok = tok is not None and len(tok) and (tok["reporting_share"] > 0).any()
    has_off = off is not None and len(off)
    if has_tok or has_off:
        parts = [
            section_open("thinking-off", "Hidden reasoning tokens and the thinking-off control (Finger Table 21)",
                         "Thinking-off"),  # fmt: skip
            '<h3 id="reasoning-tokens">Hidden reasoning tokens of the single-turn arms '
            '<span class="file">reasoning_tokens.csv</span></h3><p class="note">Per model and arm '
            "(direct, cot, list; pooled over the datasets listed): reported = share of episodes whose "
            "provider returned a reasoning-token count; mean, median and max over those episodes "
            "(the sum over an episode's steps, <code>reasoning_tokens</code> in episodes.csv).</p>",
            ci_table(tok, labels=LABELS, table_id="reasoning-tokens-table") if tok is not None and len(tok) else "",
        ]
        if has_off:
            parts.append(
                '<h3 id="thinking-off-control">Thinking-off control of direct '
                '<span class="file">thinking_off.csv</span></h3><p class="note">direct against its '
                "thinking-off variant (<code>thinking = false</code>) on the same images: EM of each, the "
                "paired change off − on (95 % paired bootstrap CI), R80 of each on the dataset's main "
                "battery and the mean reasoning tokens per episode.</p>"
                + ci_table(off, labels=LABELS, table_id="thinking-off-table")
            )
        else:
            parts.append('<p class="note">No thinking-off runs in this folder (finger-thinking-off.toml).</p>')
        parts.append("</section>")
        out.append("".join(parts))
    return out
