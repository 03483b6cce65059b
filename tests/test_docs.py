"""The README's output tables are generated from the column dictionaries the code uses."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_documents_every_output_column_as_the_code_does():
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "column_docs.py"), "--check"], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0, result.stderr


def test_readme_keeps_its_two_first_commands():
    text = (REPO / "README.md").read_text()
    first_block = text.split("```", 2)[1]
    assert [line.split("#")[0].strip() for line in first_block.strip().splitlines()] == ["make demo", "make test"]
