"""Generate the hostile-input corpus in ``tests/corpus/files`` and its expected outcomes.

    .venv/bin/python tests/corpus/make_corpus.py

Every case is declared here once with its outcome: a file-level error whose
message matches a pattern, or exact (ingested, quarantined) row counts.
``tests/test_corpus.py`` ingests the whole folder in one call and checks
each file against ``expected.json``, that nothing crashes, that no file is
written outside the lake, and that the valid files lose no row.

Inspect logs are made offline with inspect_ai itself (tests/helpers/bad_logs.py)
and then edited through its reader/writer or damaged byte-wise. The
200k-sample log for the memory check is not stored here (tens of MB): the
streaming tests generate it (tests/helpers/synthetic_logs.py).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from tests.helpers import bad_logs as bl  # noqa: E402

FILES = HERE / "files"


def _zip_with_extra_member(src: Path, dest: Path, name: str, data: bytes) -> Path:
    shutil.copyfile(src, dest)
    with zipfile.ZipFile(dest, "a") as archive:
        archive.writestr(zipfile.ZipInfo(name), data)
    return dest


def _zip_bomb(src: Path, dest: Path, member: str = "summaries.json", size: int = 100 * 2**20) -> Path:
    """Replace ``member`` by ``size`` bytes of spaces: tiny compressed, huge when read whole."""
    with zipfile.ZipFile(src) as source, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if info.filename != member:
                target.writestr(info, source.read(info))
        with target.open(member, "w") as handle:
            block = b" " * 2**20
            for _ in range(size // len(block)):
                handle.write(block)
    return dest


def build(out: Path = FILES) -> dict:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    expected: dict[str, dict] = {}

    def case(path: Path, **outcome):
        expected[path.relative_to(out).as_posix()] = outcome

    with tempfile.TemporaryDirectory() as scratch:
        base = bl.make_base_logs(Path(scratch))
        n = bl.N_SAMPLES  # 3 items x 2 epochs

        case(bl.derive(base["eval"], out / "good" / "good.eval", suite="good_eval"), ingested=n, quarantined=0)
        case(bl.derive(base["json"], out / "good" / "good.json", suite="good_json"), ingested=n, quarantined=0)

        # zips
        case(
            bl.truncate(base["eval"], out / "zip" / "truncated.eval", 0.5),
            error=r"cannot read Inspect log header \(ValueError: EOCD not found",
        )
        dotdot = bl.derive(base["eval"], out / "zip" / "dotdot_src.eval", suite="zip_dotdot")
        case(
            _zip_with_extra_member(dotdot, out / "zip" / "dotdot.eval", "../../../escaped.txt", b"escape"),
            ingested=n,
            quarantined=0,
        )
        dotdot.unlink()
        bomb_src = bl.derive(base["eval"], out / "zip" / "bomb_src.eval", suite="zip_bomb")
        case(_zip_bomb(bomb_src, out / "zip" / "bomb.eval"), error=r"cannot read samples|declares|too large")
        bomb_src.unlink()
        case(bl.random_bytes(out / "zip" / "random.eval", 3000, seed=3), error=r"cannot read Inspect log header")

        # JSON: wrong types
        wrong = json.loads(base["json"].read_text())
        wrong["samples"][0]["epoch"] = "one"
        wrong["eval"]["eval_id"] = "wrongtypes1"
        path = out / "json" / "2026-01-01T00-00-00-00-00_wrong-types_x.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(wrong))
        case(path, error=r"cannot read samples")
        header_wrong = json.loads(base["json"].read_text())
        header_wrong["eval"]["model"] = 42
        path = out / "json" / "2026-01-01T00-00-00-00-00_wrong-header_x.json"
        path.write_text(json.dumps(header_wrong))
        case(path, error=r"cannot read Inspect log header")
        case(
            bl.json_syntax_error(base["json"], out / "json" / "2026-01-01T00-00-00-00-00_syntax_x.json"),
            error=r"cannot read Inspect log header",
        )

        # scores out of range / non-finite
        case(
            bl.derive(
                base["json"],
                out / "scores" / "bad_numbers.json",
                suite="bad_numbers",
                edit=bl.set_scores(
                    bl.set_score("q1", 1, float("nan")),
                    bl.set_score("q1", 2, float("inf")),
                    bl.set_score("q2", 1, -0.5),
                    bl.set_score("q2", 2, 1.5),
                ),
            ),
            ingested=n - 4,
            quarantined=4,
        )

        # names: unicode and '/'
        case(
            bl.derive(
                base["eval"],
                out / "names" / "unicode.eval",
                model="mockllm/модель/ü 7b",
                suite="naïve/suite",
                edit=_rename_items({"q1": "вопрос/1", "q2": "q 2 ✓"}),
            ),
            ingested=n,
            quarantined=0,
        )

        # the same samples in two runs (two files): the newer run is kept
        case(
            bl.derive(
                base["json"], out / "dups" / "run_old.json", suite="dup_runs", created="2026-01-01T00:00:00+00:00"
            ),
            ingested=0,
            quarantined=n,
        )
        case(
            bl.derive(
                base["eval"], out / "dups" / "run_new.eval", suite="dup_runs", created="2026-02-01T00:00:00+00:00"
            ),
            ingested=n,
            quarantined=0,
        )

        # empty files
        for name in ("empty.eval", "empty.json", "empty.csv", "empty.jsonl"):
            case(bl.empty_file(out / "empty" / name), error=r"empty file \(0 bytes\)")

    # tables
    tables = out / "tables"
    tables.mkdir()
    (tables / "missing_score.csv").write_text("model,suite,item_id\nm,s,q1\n")
    case(
        tables / "missing_score.csv",
        error=r"cannot tell whether this table is long or wide \(columns \['model', 'suite', 'item_id'\]\)",
    )
    (tables / "bad_values.jsonl").write_text(
        "\n".join(
            [
                '{"model": "tab", "suite": "jsonl_bad", "item_id": "a", "score": 1}',
                '{"model": "tab", "suite": "jsonl_bad", "item_id": "b", "score": -1}',
                '{"model": "tab", "suite": "jsonl_bad", "item_id": "c", "score": 2}',
                '{"model": "tab", "suite": "jsonl_bad", "item_id": "d", "score": "x"}',
                '{"model": "tab", "suite": "jsonl_bad", "item_id": "e", "score": null}',
                '{"model": "tab", "suite": "jsonl_bad", "item_id": "f", "score": [1]}',
                '{"model": "tab", "suite": "jsonl_bad", "item_id": "g", "score": NaN}',
                '"just a string"',
            ]
        )
        + "\n"
    )
    case(tables / "bad_values.jsonl", ingested=1, quarantined=7)
    (tables / "long_ok.csv").write_text("model,suite,item_id,score\ntab,csv_ok,q1,1\ntab,csv_ok,q2,0\n")
    case(tables / "long_ok.csv", ingested=2, quarantined=0)

    (HERE / "expected.json").write_text(json.dumps(expected, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return expected


def _rename_items(mapping: dict[str, str]):
    def edit(log):
        for sample in log.samples:
            sample.id = mapping.get(str(sample.id), sample.id)

    return edit


if __name__ == "__main__":
    cases = build()
    print(f"{len(cases)} cases written to {FILES}")
