"""The project meets Dagster through its public API and one adapter module (resources/dagster_internals.py).

pyproject.toml allows any dagster 1.13.x: these tests are the ones to run against a newer release
of the line before taking it (the code location loads and every definition resolves; nothing but the
adapter imports Dagster's private modules, whose names a release may move)."""

import ast

from tests.conftest import REPO

ADAPTER = REPO / "resources" / "dagster_internals.py"
#: the project's Python outside the tests, which may use Dagster's internals to observe it
SOURCE_FOLDERS = ("evalpipeline", "assets", "resources", "benchmarks", "scripts")


def test_the_code_location_loads_and_its_own_automation_condition_resolves():
    """Loading and resolving every definition is what a Dagster release could break; which assets, jobs,
    sensors and schedules there are is tests/test_code_location_snapshot.py's."""
    from dagster import Definitions

    from evalpipeline.definitions import defs

    Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert {job.name for job in defs.resolve_all_job_defs()}
    # the automation sensor targets the graph, with each downstream asset's condition (ours among them)
    conditions = [graph.get(key).automation_condition for key in graph.get_all_asset_keys()]
    assert any("passed validation" in str(c.get_snapshot()) for c in conditions if c is not None)


def _private_dagster_imports(path, root=REPO) -> list[str]:
    """``module:line name`` of every import of a private Dagster module (``dagster._...``) or private
    name of the ``dagster`` package in the file at ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + (
                [f"{node.module}.{a.name}" for a in node.names] if node.module == "dagster" else []
            )
        else:
            continue
        found += [
            f"{path.relative_to(root)}:{node.lineno} {name}"
            for name in names
            if name.startswith("dagster.") and name.split(".")[1].startswith("_")
        ]
    return found


def test_no_module_but_the_adapter_imports_a_private_dagster_module():
    files = [p for folder in SOURCE_FOLDERS for p in sorted((REPO / folder).rglob("*.py"))]
    assert ADAPTER in files and len(files) > 50
    offenders = [hit for p in files if p != ADAPTER for hit in _private_dagster_imports(p)]
    assert offenders == [], "import these through resources/dagster_internals.py, or a public API"
    assert _private_dagster_imports(ADAPTER)  # the scan sees what the adapter imports


def test_the_scan_finds_each_form_of_a_private_import(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(
        "import dagster._core.events\nfrom dagster._serdes import serialize_value\n"
        "from dagster import _check\nfrom dagster import AssetKey\nimport dagster_dask.executor\n"
        "def f():\n    from dagster._utils import iterate_with_context\n"
    )
    found = [hit.split(" ")[1] for hit in _private_dagster_imports(source, tmp_path)]
    assert found == ["dagster._core.events", "dagster._serdes", "dagster._check", "dagster._utils"]


def test_the_adapters_run_tags_are_dagsters():
    """The range tags are written out in the adapter (Dagster exports no constant); a release that
    renamed them would make every range run look like a one-partition run."""
    from dagster._core.storage import tags

    from resources import dagster_internals

    assert dagster_internals.ASSET_PARTITION_RANGE_START_TAG == tags.ASSET_PARTITION_RANGE_START_TAG
    assert dagster_internals.ASSET_PARTITION_RANGE_END_TAG == tags.ASSET_PARTITION_RANGE_END_TAG
