"""The project's structure, as ARCHITECTURE-style contracts: who may import whom.

* Nothing in evalpipeline/ imports Dagster but the composition root, evalpipeline/definitions.py.
* evalpipeline/'s packages import one another downwards only (:data:`LAYERS`, lowest first; a package
  may import its own modules and any package of a lower layer), so there is no import cycle among them.
* The Dagster layer sits above: assets/ and resources/ may import evalpipeline/; evalpipeline/ imports
  neither, except its command line (the top) and the composition root. Within the Dagster layer,
  resources/ (resources, executors) sits below assets/, and resources/run/ (the run loop) above both.
Imports inside functions count as imports.
"""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: evalpipeline's units, lowest layer first; units in one tuple are peers and do not import one another.
LAYERS = [
    ("evalpipeline.schema", "evalpipeline.config", "evalpipeline.lake"),
    ("evalpipeline.stats", "evalpipeline.ingest", "evalpipeline.validate", "evalpipeline.plots", "evalpipeline.models"),
    ("evalpipeline.reliability",),
    ("evalpipeline.steps",),
    ("evalpipeline.settings",),
    ("evalpipeline.report",),
    ("resources",),
    ("assets",),
    ("resources.run",),
    ("evalpipeline.definitions",),
    ("evalpipeline.cli",),
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def _unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "resources":
        return "resources.run" if parts[1:2] == ["run"] else "resources"
    if parts[0] == "assets":
        return "assets"
    if parts[0] != "evalpipeline" or len(parts) == 1:
        return None
    return "evalpipeline." + parts[1]


def _imports():
    """(importing file, its unit, imported module) for every import of the project's own code and of dagster."""
    for folder in ("evalpipeline", "assets", "resources"):
        for path in sorted((REPO / folder).rglob("*.py")):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
                else:
                    continue
                for name in names:
                    yield path.relative_to(REPO), _unit(module), name


def test_only_the_composition_root_imports_dagster_in_evalpipeline():
    offenders = sorted(
        {
            str(path)
            for path, unit, name in _imports()
            if str(path).startswith("evalpipeline/")
            and name.split(".")[0] in ("dagster", "dagster_dask")
            and path != Path("evalpipeline/definitions.py")
        }
    )
    assert offenders == []


def test_packages_import_downwards_only():
    upward = sorted(
        {
            f"{path}: {unit} imports {name}"
            for path, unit, name in _imports()
            if unit in RANK and _unit(name) in RANK and _unit(name) != unit and RANK[_unit(name)] >= RANK[unit]
        }
    )
    assert upward == []


@pytest.mark.parametrize("unit", sorted(RANK))
def test_every_unit_is_placed(unit):
    assert any(u == unit for u in RANK)


def test_every_package_of_evalpipeline_is_in_a_layer():
    packages = {
        f"evalpipeline.{p.name if p.is_dir() else p.stem}"
        for p in (REPO / "evalpipeline").iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py")
    }
    assert packages - set(RANK) == set()
