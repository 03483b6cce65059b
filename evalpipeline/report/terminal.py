"""Plain-text output for a terminal: names shown safely, columns aligned by displayed width.

Kept out of the hashed pipeline code: how a leaderboard is printed changes no table.
"""

from __future__ import annotations

import unicodedata

import pandas as pd

from evalpipeline.lake.keys import printable


def display_width(text: str) -> int:
    """Columns ``text`` takes on a terminal: combining marks and format characters take none (a
    decomposed ``é`` is one column), East Asian wide and full-width characters two."""
    width = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) == "Cf":
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def pad(text: str, width: int) -> str:
    """``text`` followed by spaces up to ``width`` displayed columns."""
    return text + " " * max(0, width - display_width(text))


def format_leaderboard(board: pd.DataFrame, limit: int | None = None, rest: str = "") -> str:
    """A plain-text leaderboard: rank, model, posterior mean with HPDI, CLT interval, n (and the independent
    attempts it was worth, where repeats or clusters made it fewer); the columns line
    up whatever the names' length or script and however many models there are. ``limit``: only the
    first ``limit`` rows, then one line counting the others and pointing to ``rest`` (where they are)."""
    hidden = board.iloc[limit:] if limit is not None else board.iloc[:0]
    board = board.iloc[:limit] if limit is not None else board
    names = [printable(model) for model in board["model"]]
    name_width = max([28, *map(display_width, names)])
    rank_width = max([1, *(len(str(rank)) for rank in board["rank"])])
    lines = []
    for row, name in zip(board.itertuples(), names):
        flag = f" ({row.clt_flag})" if isinstance(row.clt_flag, str) else ""
        worth = f" (worth ~{row.n_effective:.0f} independent)" if getattr(row, "design_effect", 1.0) > 1 else ""
        lines.append(
            f"  {str(row.rank) + '.':>{rank_width + 1}} {pad(name, name_width)} {row.posterior_mean:.3f}  "
            f"{row.hpdi_mass:.0%} HPDI [{row.hpdi_low:.3f}, {row.hpdi_high:.3f}]  "
            f"CLT [{row.clt_low:.3f}, {row.clt_high:.3f}]{flag}  n={row.n}{worth}"
        )
    if len(hidden):
        ranks = (
            f"rank {hidden['rank'].iloc[0]}"
            if len(hidden) == 1
            else f"ranks {hidden['rank'].iloc[0]}-{hidden['rank'].iloc[-1]}"
        )
        lines.append(f"  ... {len(hidden)} more ({ranks}){': ' + rest if rest else ''}")
    return "\n".join(lines)
