"""The README and docs/ say what the code does: generated tables, examples that run, links that resolve."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_output_tables_doc_documents_every_column_as_the_code_does():
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "column_docs.py"), "--check"], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0, result.stderr


def test_readme_keeps_its_two_first_commands():
    text = (REPO / "README.md").read_text()
    first_block = text.split("```", 2)[1]
    assert [line.split("#")[0].strip() for line in first_block.strip().splitlines()] == ["make demo", "make test"]


def test_ingest_help_lists_every_option_and_format_the_docs_document():
    import re

    from evalpipeline.cli.main import build_parser

    (ingest,) = [
        p for a in build_parser()._subparsers._group_actions for name, p in a.choices.items() if name == "ingest"
    ]
    help_text = " ".join(a.help or "" for a in ingest._actions)
    text = (REPO / "docs" / "command-line.md").read_text()
    block = text[text.index("evalpipeline ingest PATH [options]") :]
    block = block[: block.index("```")]
    documented = set(re.findall(r"^\s+(--[a-z-]+)", block, flags=re.M)) | set(re.findall(r" / (--[a-z-]+)", block))
    assert documented and documented <= {o for a in ingest._actions for o in a.option_strings}, documented
    for option in documented:  # every option explains itself in --help
        (action,) = [a for a in ingest._actions if option in a.option_strings]
        assert action.help, option
    for format_hint in ("Inspect", "lm-evaluation-harness", "long or wide", "folder"):
        assert format_hint in help_text, format_hint
    assert "tables without a suite column" in help_text


def test_sample_and_quarantine_docs_list_the_columns_a_reader_of_the_lake_gets():
    """The files hold every column but model and suite (folder names, added by readers of the
    folder); the quarantine table adds reason; cov_<name> stands for the mapped covariates."""
    from evalpipeline.schema import column_docs, quarantine_schema, samples_schema

    documented = set(column_docs()) - {"cov_<name>"}
    assert documented == set(samples_schema().names)
    assert {"model", "suite"} - set(samples_schema(with_partition_columns=False).names) == {"model", "suite"}
    assert "reason" not in column_docs() and "(in the folder name" in column_docs()["model"]
    assert set(column_docs(quarantine=True)) - {"cov_<name>"} == set(quarantine_schema().names)
    assert "cov_<name>" in column_docs()


def test_the_documented_way_to_read_the_samples_folder_keeps_every_covariate(tmp_path):
    """`pd.read_parquet` of the folder takes the first file's columns and can drop `cov_*` columns only
    other partitions have; the pyarrow snippet of docs/output-tables.md keeps them."""
    import re

    import evalpipeline.cli.main as cli

    (tmp_path / "scores.csv").write_text(
        "model,suite,question,correct,level\ngpt-x,arith,q1,1,easy\ngpt-x,arith,q2,0,hard\n007,2024,q1,1,\n"
    )  # names a reader would take for numbers
    (tmp_path / "wide.csv").write_text("item_id,gpt-x,claude-y\nq1,1,0\nq2,0,1\n")
    lake = tmp_path / "lake"
    assert (
        cli.main(
            [
                "ingest",
                str(tmp_path / "scores.csv"),
                "--map",
                "item_id=question,score=correct,cov_level=level",
                "--lake",
                str(lake),
                "--no-validate",
            ]
        )
        == 0
    )
    assert cli.main(["ingest", str(tmp_path / "wide.csv"), "--lake", str(lake), "--no-validate"]) == 0
    (board_snippet, union_snippet) = [
        b
        for b in re.findall(r"```python\n(.*?)```", REPO.joinpath("docs", "output-tables.md").read_text(), flags=re.S)
        if "samples" in b and "partitioning" in b
    ]
    assert "unify_schemas" in union_snippet
    board_snippet = "\n".join(line for line in board_snippet.splitlines() if "suite_comparison" not in line)
    for snippet in (board_snippet, board_snippet + "\n" + union_snippet):
        namespace: dict = {}
        exec(snippet.replace('"data/lake/', f'"{lake}/'), namespace)
        samples = namespace["samples"]
        assert len(samples) == 7 and set(samples["model"]) == {"gpt-x", "claude-y", "007"}
        assert set(samples["suite"]) == {"arith", "wide", "2024"}
    by_item = samples[(samples["suite"] == "arith")].set_index("item_id")["cov_level"].to_dict()
    assert by_item == {"q1": "easy", "q2": "hard"}
    assert samples.loc[samples["suite"] != "arith", "cov_level"].isna().all()


def test_the_docs_state_the_exit_codes_ingest_returns(tmp_path):
    """Ingest exits 0 when some files were unreadable (1 only when all were)."""
    import re

    import evalpipeline.cli.main as cli

    section = (REPO / "docs" / "command-line.md").read_text()
    codes = dict(re.findall(r"^- ([012]): (.*)$", section.split("Exit code of `evalpipeline ingest`:", 1)[1], re.M))
    assert codes["0"].startswith("it ran and read at least one file, even if others were unreadable")
    assert codes["1"].startswith("every file found was unreadable, or a partition could not be consolidated")
    assert codes["2"].startswith("nothing was done, for a bad option or setting")

    good = tmp_path / "good.wide.csv"
    good.write_text("item_id,gpt-x\nq1,1\n")
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "none").mkdir()
    lake = ["--lake", str(tmp_path.with_name(tmp_path.name + "-lake")), "--no-validate"]  # not inside what is read
    assert cli.main(["ingest", str(tmp_path), *lake]) == 0  # one read, one unreadable
    assert cli.main(["ingest", str(tmp_path / "none"), *lake]) == 0  # no log file
    assert cli.main(["ingest", str(tmp_path / "empty.json"), *lake]) == 1
    assert cli.main(["ingest", str(tmp_path / "missing"), *lake]) == 2


def test_every_local_link_in_the_readme_and_docs_resolves():
    """Each relative link of README.md and docs/ names a file that exists, and a #fragment one of its headings
    (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens)."""
    import re

    def anchors(path: Path) -> set[str]:
        headings = re.findall(r"^#+ (.*)$", path.read_text(), flags=re.M)
        return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}

    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):  # http:, mailto:
                continue
            path, _, fragment = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
            elif fragment and resolved.is_file() and fragment not in anchors(resolved):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []


def test_the_readme_is_short_and_the_product_tells_no_development_history():
    import subprocess

    assert len((REPO / "README.md").read_text().splitlines()) <= 300
    story = subprocess.run(
        [
            "git",
            "grep",
            "-niE",
            r"[a-z]+-?(th|st|nd|rd) session|this[ ]session|found by (a|an) "
            r"(review|adversarial)",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert story.stdout == "", story.stdout


def test_the_configuration_doc_shows_every_setting_and_names_every_environment_variable(tmp_path):
    """docs/configuration.md's TOML blocks hold every key the configuration check knows, table by table (the
    check's own list, from its refusal of an unknown key), and the page names every EVALPIPELINE_ variable
    the code reads."""
    import re
    import tomllib

    from evalpipeline.config import ConfigError
    from evalpipeline.settings import CONFIG_SECTIONS, check_config

    doc = (REPO / "docs" / "configuration.md").read_text()
    documented: dict[str, set] = {}
    for block in re.findall(r"```toml\n(.*?)```", doc, flags=re.S):
        for table, keys in tomllib.loads(block).items():
            inner = keys.values() if table == "judge" else [keys]  # [judge.<scorer>] tables
            documented.setdefault(table, set()).update(*[set(k) for k in inner])
        # a key shown commented out (a file name the reader must supply) counts: `# taxonomy = "..."`
        for table, body in re.findall(r"^\[(\w+)\][^\n]*\n(.*?)(?=^\[|\Z)", block, flags=re.S | re.M):
            documented.setdefault(table, set()).update(re.findall(r"^# (\w+) = ", body, flags=re.M))
    for table in CONFIG_SECTIONS:
        probe = tmp_path / f"{table}.toml"
        probe.write_text(f"[{table}{'.scorer' if table == 'judge' else ''}]\nzz_unknown = 1\n")
        with pytest.raises(ConfigError, match=r"unknown keys in .*known: \[") as refused:
            check_config(probe)
        known = set(re.findall(r"'(\w+)'", str(refused.value).split("known: ", 1)[1]))
        assert known and known - documented.get(table, set()) == set(), table

    code = "\n".join(
        p.read_text()
        for folder in ("evalpipeline", "resources", "assets")
        for p in sorted((REPO / folder).rglob("*.py"))
    )
    variables = set(re.findall(r"[\"'](EVALPIPELINE_[A-Z_]+)[\"']", code))
    assert len(variables) >= 10
    assert {v for v in variables if f"`{v}`" not in doc} == set()
