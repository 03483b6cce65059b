"""Code versions follow the code, not its comments, docstrings or layout."""

import importlib
import os
import sys

import pytest

from evalpipeline.lake.versions import code_version

MODULE = '''"""A module docstring."""

import math

SCALE = 2.0  # a comment


class Model:
    """A class docstring."""

    def log_density(self, x):
        """A method docstring."""
        return -0.5 * (x / SCALE) ** 2 - math.log(SCALE)


async def later():
    "An async docstring."
    return "not a docstring"
'''


@pytest.fixture
def module(tmp_path, monkeypatch):
    """A fresh module ``versioned_probe`` whose source a test rewrites; returns the writer."""
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "versioned_probe.py"
    stamp = [1_700_000_000]

    def write(source: str) -> str:
        path.write_text(source)
        stamp[0] += 1  # a new modification time, as an edit gives, whatever the clock's resolution
        os.utime(path, (stamp[0], stamp[0]))
        sys.modules.pop("versioned_probe", None)
        importlib.invalidate_caches()
        return code_version(["versioned_probe"], {"prior": 1})

    yield write
    sys.modules.pop("versioned_probe", None)


def test_comments_docstrings_and_layout_do_not_change_the_version(module):
    before = module(MODULE)
    edited = (
        MODULE.replace('"""A module docstring."""', '"""Another module docstring,\n\nlonger."""')
        .replace("# a comment", "# why the scale is 2")
        .replace('"""A class docstring."""', '"""Reworded."""')
        .replace('"""A method docstring."""\n', "")
        .replace('"An async docstring."', '"""Reworded too."""')
        .replace(
            "return -0.5 * (x / SCALE) ** 2 - math.log(SCALE)",
            "return (-0.5 * (x / SCALE) ** 2\n                - math.log(SCALE))",
        )
        .replace("\n\n\nclass", "\n\n\n\n# a new comment line\nclass")
    )
    assert edited != MODULE
    assert module(edited) == before


@pytest.mark.parametrize(
    "edit",
    [
        ("SCALE = 2.0", "SCALE = 2.5"),  # a constant
        ("(x / SCALE) ** 2", "(x / SCALE) ** 3"),  # an expression
        ('return "not a docstring"', 'return "another string"'),  # a string that is not a docstring
        ('"""A method docstring."""', "x = abs(x)"),  # a statement where the docstring was
    ],
)
def test_a_change_to_the_code_changes_the_version(module, edit):
    before = module(MODULE)
    assert module(MODULE.replace(*edit)) != before


def test_the_settings_are_part_of_the_version(module):
    module(MODULE)
    assert code_version(["versioned_probe"], {"prior": 1}) != code_version(["versioned_probe"], {"prior": 2})


def test_a_file_that_does_not_parse_is_versioned_by_its_bytes(tmp_path, monkeypatch):
    from evalpipeline.lake.versions import code_fingerprint

    path = tmp_path / "broken.py"
    path.write_text("def broken(:\n    # a comment\n")
    assert code_fingerprint(path) == path.read_bytes()
    path.write_text("def broken(:\n    # another comment\n")
    os.utime(path, (1_700_000_100, 1_700_000_100))
    assert code_fingerprint(path) == path.read_bytes()
