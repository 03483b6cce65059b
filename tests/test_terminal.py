"""The plain-text leaderboard lines up for long, decomposed, wide and many names."""

import unicodedata

import pandas as pd

from evalpipeline.report.terminal import display_width, format_leaderboard


def _board(names):
    n = len(names)
    return pd.DataFrame(
        {
            "rank": range(1, n + 1),
            "model": names,
            "posterior_mean": [0.5] * n,
            "hpdi_mass": [0.95] * n,
            "hpdi_low": [0.4] * n,
            "hpdi_high": [0.6] * n,
            "clt_low": [0.4] * n,
            "clt_high": [0.6] * n,
            "clt_flag": [None] * n,
            "n": [100] * n,
        }
    )


def test_display_width():
    assert display_width("abc") == 3
    assert display_width(unicodedata.normalize("NFD", "modèle")) == 6 == display_width("modèle")
    assert display_width("模型") == 4
    assert display_width("a\u200bb") == 2  # zero-width space


def test_leaderboard_columns_line_up():
    names = [f"m{i}" for i in range(9)] + ["x" * 40, unicodedata.normalize("NFD", "modèle-é"), "模型 7b"]
    lines = format_leaderboard(_board(names)).splitlines()
    assert len(lines) == 12
    # the score starts at the same displayed column on every line, ranks 1 to 12 included
    starts = {display_width(line[: line.index(" 0.500")]) for line in lines}
    assert len(starts) == 1, lines
    assert lines[0].startswith("   1. m0") and lines[11].startswith("  12. 模型 7b")


def test_a_long_leaderboard_prints_its_top_and_counts_the_rest():
    board = _board([f"m{i}" for i in range(101)])
    lines = format_leaderboard(board, 20, rest="every model in /lake/board.parquet").splitlines()
    assert len(lines) == 21 and lines[19].startswith("  20. m19")
    assert lines[20] == "  ... 81 more (ranks 21-101): every model in /lake/board.parquet"
    assert format_leaderboard(board, 100).splitlines()[-1] == "  ... 1 more (rank 101)"
    assert format_leaderboard(board, 101) == format_leaderboard(board)  # nothing left to count
