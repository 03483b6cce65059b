"""The hostile-input corpus (tests/corpus, made by make_corpus.py), ingested in one run."""

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from evalpipeline.ingest import find_log_files, ingest_paths
from evalpipeline.lake import Lake

CORPUS = Path(__file__).resolve().parent / "corpus"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    files = root / "deep" / "er" / "files"  # '..' members would land in root if anything extracted them
    shutil.copytree(CORPUS / "files", files)
    lake = Lake(root / "deep" / "er" / "lake")
    report = ingest_paths(find_log_files(files), lake)
    return root, files, lake, report


def _rows_by_file(lake: Lake, table: str) -> dict[str, int]:
    paths = list((lake.root / table).glob("model=*/suite=*/*.parquet"))
    if not paths:
        return {}
    frame = pd.concat([pd.read_parquet(p, columns=["log_path"]) for p in paths])
    return frame["log_path"].value_counts().to_dict()


def _unplaced_by_file(lake: Lake) -> dict[str, int]:
    paths = list((lake.root / "unplaced").glob("*.parquet"))
    if not paths:
        return {}
    return pd.concat([pd.read_parquet(p, columns=["log_path"]) for p in paths])["log_path"].value_counts().to_dict()


def test_every_file_is_accounted_for(ingested):
    _, files, _, report = ingested
    seen = {Path(p).relative_to(files).as_posix() for p in map(str, find_log_files(files))}
    assert seen == set(EXPECTED)
    assert report.files_seen == len(EXPECTED)
    assert report.rows_read == report.rows_ingested + report.rows_quarantined
    for account in report.partitions.values():
        assert account.rows_read == account.rows_ingested + account.rows_quarantined


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_outcome(ingested, name):
    _, files, lake, report = ingested
    path = str(files / name)
    expected = EXPECTED[name]
    errors = {e.path: e.error for e in report.file_errors}
    if "error" in expected:
        assert path in errors, f"{name} was not reported as unreadable"
        assert errors[path].startswith(f"{path}: ")
        assert re.search(expected["error"], errors[path]), errors[path]
        assert _rows_by_file(lake, "ingested").get(path, 0) == 0
    else:
        assert path not in errors, errors.get(path)
        assert _rows_by_file(lake, "samples").get(path, 0) == expected["ingested"]
        # quarantined: in a partition's quarantine table, or unplaced (no model or suite to hold it)
        quarantined = _rows_by_file(lake, "quarantine").get(path, 0) + _unplaced_by_file(lake).get(path, 0)
        assert quarantined == expected["quarantined"]


def test_nothing_escapes_the_lake_and_names_survive(ingested):
    root, files, lake, _ = ingested
    outside = [p for p in root.rglob("*") if p.is_file() and files not in p.parents and lake.root not in p.parents]
    assert outside == []
    samples = pd.read_parquet(lake.root / "samples")
    assert "mockllm/модель/ü 7b" in set(samples["model"].astype(str))
    assert {"вопрос/1", "q 2 ✓"} <= set(samples["item_id"])
