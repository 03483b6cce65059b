"""The Inspect reader streams: chunks, duplicates across chunks, hostile zips, a 200k-sample log.

Logs are synthetic (``tests/helpers/synthetic_logs.py``): inspect_ai runs once, on a
two-sample task, and its log is the template for logs of any size. They are
checked against inspect_ai's own readers first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import inspect_ai.log  # noqa: F401  (installs inspect_ai's zstd support in zipfile, to copy members)
import pandas as pd
import pyarrow as pa
import pytest
from inspect_ai.log import read_eval_log, read_eval_log_sample, read_eval_log_sample_summaries

from evalpipeline.ingest import IngestOptions, Source, SourceReadError, find_log_files, ingest_paths
from evalpipeline.ingest import inspect_logs
from evalpipeline.ingest.inspect_logs import InspectReader, read_inspect_log
from evalpipeline.lake import Lake, sha256_file
from evalpipeline.schema import covariate_schema, staged_schema, to_arrow
from tests.helpers import synthetic_logs as syn

REPO = Path(__file__).resolve().parents[1]
N_SMALL = 1200  # 600 items x 2 epochs
COVARIATES = {"domain": "domain", "subdomain": "subdomain", "cov_difficulty": "difficulty", "cov_source": "source"}


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def template(tmp_path_factory) -> syn.Template:
    return syn.make_template(tmp_path_factory.mktemp("template"))


@pytest.fixture(scope="module")
def small(template, tmp_path_factory) -> dict[str, Path]:
    """A 1200-sample log (600 items x 2 epochs) per format."""
    folder = tmp_path_factory.mktemp("small")
    return {
        fmt: syn.write_synthetic_log(
            folder / syn.log_file_name(N_SMALL, fmt, epochs=2), N_SMALL, template=template, epochs=2
        )
        for fmt in ("eval", "json")
    }


@pytest.fixture(scope="session")
def log_200k(template, tmp_path_factory) -> Path:
    """The 200k-sample ``.eval`` log, written once per session (~20 s)."""
    folder = tmp_path_factory.mktemp("large")
    return syn.write_synthetic_log(folder / syn.log_file_name(200_000, "eval"), 200_000, template=template)


def read_chunks(path: Path, chunk_rows: int, **options) -> list[pd.DataFrame]:
    source = Source(str(path), sha256_file(path), "inspect")
    return [c.rows for c in InspectReader().read(source, IngestOptions(chunk_rows=chunk_rows, **options))]


def staged(chunks: list[pd.DataFrame]) -> pa.Table:
    """The chunks as ingest stages them: each cast to the staged schema, covariates typed by the first."""
    tables = []
    for chunk in chunks:
        extra = covariate_schema(tables[0].schema) if tables else None
        tables.append(to_arrow(chunk, staged_schema(with_partition_columns=False), extra=extra))
    return pa.concat_tables(tables)


def rewrite_eval(
    src: Path,
    dest: Path,
    *,
    replace: dict[str, bytes] | None = None,
    extra: dict[str, bytes] | None = None,
    declare: dict[str, int] | None = None,
) -> Path:
    """Copy the ``.eval`` zip ``src`` to ``dest`` (deflate), member by member, with changes.

    ``replace``: new bytes for members; ``extra``: members added (any name,
    ``..`` included); ``declare``: uncompressed sizes to write in the central
    directory instead of the true ones (how a zip bomb lies).
    """
    replace, extra, declare = replace or {}, extra or {}, declare or {}
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, replace.get(info.filename, zin.read(info.filename)))
        for name, data in extra.items():
            zout.writestr(zipfile.ZipInfo(name), data, zipfile.ZIP_DEFLATED)
        for name, size in declare.items():
            zout.getinfo(name).file_size = size  # written to the central directory on close
    return dest


# -- the synthetic logs are real Inspect logs -------------------------------------------------


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_synthetic_log_reads_back_with_inspect(small, fmt):
    from inspect_ai.analysis import samples_df

    path = small[fmt]
    summaries = read_eval_log_sample_summaries(str(path))
    assert len(summaries) == N_SMALL
    expected = [syn.expected_row(*p) for p in syn.positions(N_SMALL, 2)]
    assert [(str(s.id), s.epoch) for s in summaries] == [(r["item_id"], r["epoch"]) for r in expected]
    for summary, row in zip(summaries, expected):
        assert summary.error == row["error"]
        assert (
            (summary.scores or {}).get(syn.SCORER, None) is None
            if row["value"] is None
            else (summary.scores[syn.SCORER].value == row["value"])
        )
        assert summary.metadata == row["metadata"]
    frame = samples_df(str(path), quiet=True)
    assert len(frame) == N_SMALL and set(frame["id"]) == {r["item_id"] for r in expected}
    errored = next(r for r in expected if r["error"])
    sample = read_eval_log_sample(str(path), id=errored["item_id"], epoch=errored["epoch"])
    assert sample.error.message == errored["error"] and not sample.scores
    assert read_eval_log(str(path), header_only=True).results.total_samples == N_SMALL


def test_synthetic_eval_log_reads_in_full(template, tmp_path):
    log = syn.write_synthetic_log(tmp_path / syn.log_file_name(50, "eval"), 50, template=template)
    full = read_eval_log(str(log))
    assert len(full.samples) == 50 and full.samples[0].messages[0].text.startswith("Question 0:")


# -- chunking changes nothing ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_chunks_give_the_rows_of_one_chunk(small, fmt):
    path = small[fmt]
    whole = read_chunks(path, 10**6, metadata_map=COVARIATES)
    assert len(whole) == 1 and len(whole[0]) == N_SMALL
    for chunk_rows in (13, 500, N_SMALL):
        chunks = read_chunks(path, chunk_rows, metadata_map=COVARIATES)
        assert [len(c) for c in chunks] == [min(chunk_rows, N_SMALL - i) for i in range(0, N_SMALL, chunk_rows)]
        assert staged(chunks).equals(staged(whole))
        assert pd.concat(chunks, ignore_index=True).astype(object).equals(whole[0].astype(object))
    _, frame = read_inspect_log(path, metadata_map=COVARIATES)
    assert staged([frame]).equals(staged(whole))


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_one_sample_chunks(template, tmp_path, fmt):
    log = syn.write_synthetic_log(tmp_path / f"tiny.{fmt}", 40, template=template, epochs=2)
    whole = read_chunks(log, 100, metadata_map=COVARIATES)
    chunks = read_chunks(log, 1, metadata_map=COVARIATES)
    assert len(chunks) == 40 and staged(chunks).equals(staged(whole))


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_streamed_rows_are_the_samples(small, fmt):
    _, frame = read_inspect_log(small[fmt], metadata_map=COVARIATES)
    expected = [syn.expected_row(*p) for p in syn.positions(N_SMALL, 2)]
    assert frame["sample_index"].tolist() == list(range(N_SMALL))
    assert list(zip(frame["item_id"], frame["epoch"])) == [(r["item_id"], r["epoch"]) for r in expected]
    value = {"C": 1.0, "I": 0.0, "P": 0.5, None: None}
    assert [None if pd.isna(s) else s for s in frame["score"]] == [value[r["value"]] for r in expected]
    assert [None if pd.isna(e) else e for e in frame["error"]] == [r["error"] for r in expected]
    assert frame["reason"].isna().all()
    assert frame["cov_difficulty"].dtype == "float64"
    assert frame["cov_difficulty"].tolist() == [r["metadata"]["difficulty"] for r in expected]
    assert [json.loads(m) for m in frame["metadata_json"]] == [r["metadata"] for r in expected]


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_tiny_read_size_parses_across_every_buffer_boundary(small, fmt, monkeypatch):
    expected = read_chunks(small[fmt], 250)
    monkeypatch.setattr(inspect_logs, "READ_SIZE", 61)  # values, strings and numbers cut everywhere
    got = read_chunks(small[fmt], 250)
    assert staged(got).equals(staged(expected))


def test_json_stream_numbers_cut_at_every_buffer_boundary(monkeypatch):
    """A number cut after "1" or "1." at the end of a buffer is not taken for a whole number (it was: "1"
    was returned and ".5" left to break the next token)."""
    import io

    document = '{"a": [1.5, -20.25e-3, 3E+2, 0, true, null, "x"], "b": {"c": 12345.678}, "d": -0.5}'
    want = json.loads(document)
    for size in range(1, len(document) + 1):
        monkeypatch.setattr(inspect_logs, "READ_SIZE", size)
        stream = inspect_logs._JsonStream(io.BytesIO(document.encode()), what="the test document")
        got = {}
        for key, _ in stream.object_items():
            if key == "b":
                stream.skip()
            else:
                got[key] = stream.value() if key == "d" else list(stream.array_items())
        stream.expect_end()
        assert got == {"a": want["a"], "d": want["d"]}, size


def test_log_without_summaries_json_falls_back_to_inspect(template, small, tmp_path):
    odd = syn.write_synthetic_log(
        tmp_path / "journal_only.eval", N_SMALL, template=template, epochs=2, summaries_json=False
    )
    assert "summaries.json" not in zipfile.ZipFile(odd).namelist()
    _, frame = read_inspect_log(odd)
    _, normal = read_inspect_log(small["eval"])
    assert staged([frame.drop(columns=["log_path", "log_sha256"]).assign(log_path="x", log_sha256="x")]).equals(
        staged([normal.drop(columns=["log_path", "log_sha256"]).assign(log_path="x", log_sha256="x")])
    )


# -- duplicates across a chunk boundary -----------------------------------------------------------


def _duplicate_first_sample_at_the_end(path: Path, dest: Path) -> Path:
    """``path`` with its first sample (summary) appended again as the last one."""
    if path.suffix == ".json":
        log = json.loads(path.read_text())
        log["samples"].append(log["samples"][0])
        dest.write_text(json.dumps(log))
        return dest
    with zipfile.ZipFile(path) as zf:
        summaries = json.loads(zf.read("summaries.json"))
    return rewrite_eval(path, dest, replace={"summaries.json": json.dumps(summaries + summaries[:1]).encode()})


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_duplicate_across_chunks_is_quarantined(small, fmt, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    dup = _duplicate_first_sample_at_the_end(small[fmt], landing / f"dup.{fmt}")
    first = syn.expected_row(0, 0, 1)
    message = f"duplicate (item_id {first['item_id']!r}, epoch 1) in the log; first seen at sample index 0"

    chunks = read_chunks(dup, 100)
    assert len(chunks) == N_SMALL // 100 + 1 and len(chunks[-1]) == 1  # the copy is alone in the last chunk
    frame = pd.concat(chunks, ignore_index=True)
    assert frame.loc[N_SMALL, "reason"] == message and frame["reason"].notna().sum() == 1
    assert frame.loc[0, "reason"] is None

    report = ingest_paths(find_log_files(landing), Lake(tmp_path / "lake"), IngestOptions(chunk_rows=100))
    account = report.partitions[(syn.TEMPLATE_MODEL, syn.TEMPLATE_SUITE)]
    assert (account.rows_read, account.rows_ingested, account.rows_quarantined) == (N_SMALL + 1, N_SMALL, 1)
    assert report.quarantine_reasons == {"duplicate (item_id, epoch) within one log": 1}


# -- summaries.json and the samples/ members disagree ---------------------------------------------


def _summaries(path: Path) -> list:
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("summaries.json"))


def _ingests_nothing_of(bad: Path, good: Path, tmp_path: Path) -> str:
    lake = Lake(tmp_path / "lake")
    report = ingest_paths([bad, good], lake)
    assert [e.path for e in report.file_errors] == [str(bad)]
    assert report.rows_read == N_SMALL  # only the good log's rows: none of the bad one's lands
    assert report.rows_ingested + report.rows_quarantined == N_SMALL
    return report.file_errors[0].error


def test_summaries_cut_short_is_a_file_error_not_a_silent_loss(small, tmp_path):
    """Rows come from summaries.json: a sample file it does not list would vanish without a word."""
    short = _summaries(small["eval"])[:-5]
    bad = rewrite_eval(small["eval"], tmp_path / "short.eval", replace={"summaries.json": json.dumps(short).encode()})
    with pytest.raises(SourceReadError) as caught:
        read_inspect_log(bad)
    expected = (
        f"summaries.json lists {N_SMALL - 5} sample(s) but the archive holds {N_SMALL} sample files "
        "(samples/*.json): the log is inconsistent, and its 5 unlisted sample(s) would be lost"
    )
    assert caught.value.message.startswith(expected), caught.value.message
    assert _ingests_nothing_of(bad, small["json"], tmp_path).startswith(f"{bad}: {expected}")


def test_a_later_shorter_summaries_member_is_caught(small, tmp_path):
    """Two summaries.json members: the last wins (as in every zip reader); a short one cannot hide samples."""
    short = json.dumps(_summaries(small["eval"])[:10]).encode()
    with pytest.warns(UserWarning, match="Duplicate name"):
        bad = rewrite_eval(small["eval"], tmp_path / "two.eval", extra={"summaries.json": short})
    with pytest.raises(SourceReadError, match=f"summaries.json lists 10 sample\\(s\\) but the archive holds {N_SMALL}"):
        read_inspect_log(bad)


def test_a_sample_file_written_twice_is_one_sample(small, tmp_path):
    """inspect_ai appends a sample logged again under its name again: one sample, one summary, no error."""
    with zipfile.ZipFile(small["eval"]) as zf:
        name = next(n for n in zf.namelist() if n.startswith("samples/"))
        again = zf.read(name)
    with pytest.warns(UserWarning, match="Duplicate name"):
        twice = rewrite_eval(
            small["eval"], tmp_path / "twice.eval", extra={name: again, "samples/../x_epoch_1.json": b"{}"}
        )
    _, frame = read_inspect_log(twice)
    _, normal = read_inspect_log(small["eval"])
    assert len(frame) == N_SMALL and frame["item_id"].tolist() == normal["item_id"].tolist()


# -- hostile zips ---------------------------------------------------------------------------------


def _ingest_with_a_good_log(bad: Path, good: Path, tmp_path: Path):
    report = ingest_paths([bad, good], Lake(tmp_path / "lake"))
    assert [e.path for e in report.file_errors] == [str(bad)]
    assert report.rows_read == N_SMALL  # the good log still lands, whole
    return report.file_errors[0].error


@pytest.mark.parametrize(
    "name",
    [
        "../../escaped.txt",
        "/tmp/absolute-escaped.txt",
        "..\\..\\escaped.txt",
        "samples/../summaries.json",  # a normalising reader would take it for summaries.json
        "samples/../../header.json",
    ],
)
def test_member_with_dotdot_or_absolute_name_is_never_extracted_nor_read(small, tmp_path, name):
    """Members are read by exact name, never extracted: a hostile name is inert (tests/corpus: zip/dotdot.eval)."""
    junk = b'[{"id": "planted", "epoch": 1}]' if name.endswith(".json") else b"escaped"
    bad = rewrite_eval(small["eval"], tmp_path / "landing" / "traversal.eval", extra={name: junk})
    assert name in zipfile.ZipFile(bad).namelist()  # the name is in the archive as written

    _, frame = read_inspect_log(bad)
    _, normal = read_inspect_log(small["eval"])
    assert frame["item_id"].tolist() == normal["item_id"].tolist() and "planted" not in set(frame["item_id"])

    report = ingest_paths([bad], Lake(tmp_path / "lake"))
    assert report.file_errors == [] and report.rows_read == N_SMALL
    assert list(tmp_path.parent.rglob("*escaped.txt")) == []  # pytest's whole temporary tree of this run
    for root in (Path.cwd(), Path.cwd().parent, Path.cwd().parent.parent, Path("/tmp")):
        assert not (root / "escaped.txt").exists() and not (root / "absolute-escaped.txt").exists()
    written = sorted(p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*") if p.is_file())
    assert set(written) == {"landing", "lake"}


@pytest.mark.parametrize("member", ["summaries.json", "header.json"])
def test_member_declaring_a_huge_size_is_refused_unread(small, tmp_path, member):
    bad = rewrite_eval(small["eval"], tmp_path / "declares_1tib.eval", declare={member: 2**40})

    start = time.perf_counter()
    with pytest.raises(SourceReadError) as caught:
        read_inspect_log(bad)
    assert time.perf_counter() - start < 5
    assert caught.value.message.startswith(f"zip member {member!r} declares {2**40} bytes uncompressed, over the "), (
        caught.value.message
    )
    assert "zip bomb" in caught.value.message

    error = _ingest_with_a_good_log(bad, small["eval"], tmp_path)
    assert error.startswith(f"{bad}: zip member {member!r} declares {2**40} bytes")


def test_member_inflating_past_its_declared_size_stops(small, tmp_path):
    """A bomb that lies: 64 MiB of JSON whitespace (64 KiB deflated) declared as 1000 bytes."""
    bomb = b"[" + b" " * (64 * 2**20) + b"]"
    bad = rewrite_eval(
        small["eval"], tmp_path / "bomb.eval", replace={"summaries.json": bomb}, declare={"summaries.json": 1000}
    )
    assert zipfile.ZipFile(bad).getinfo("summaries.json").compress_size < 2**17

    with pytest.raises(SourceReadError) as caught:
        read_inspect_log(bad)
    assert caught.value.message == (
        "zip member 'summaries.json' inflates past its declared size of 1000 bytes (a zip bomb?); not read further"
    )
    error = _ingest_with_a_good_log(bad, small["eval"], tmp_path)
    assert error.startswith(f"{bad}: zip member 'summaries.json' inflates past its declared size")


def test_honest_bomb_over_the_limit_is_refused(small, tmp_path, monkeypatch):
    bad = rewrite_eval(small["eval"], tmp_path / "big.eval", replace={"summaries.json": b"[" + b" " * 2**22 + b"]"})
    monkeypatch.setattr(inspect_logs, "MAX_MEMBER_BYTES", 2**20)
    with pytest.raises(
        SourceReadError,
        match=r"zip member 'summaries.json' declares 4194306 bytes uncompressed, "
        r"over the 1048576-byte limit",
    ):
        read_inspect_log(bad)


def test_corrupt_member_fails_its_crc(small, tmp_path):
    with zipfile.ZipFile(small["eval"]) as zf:
        summaries = zf.read("summaries.json")
    bad = tmp_path / "crc.eval"
    with zipfile.ZipFile(small["eval"]) as zin, zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    data = bad.read_bytes()
    at = data.rindex(summaries[:200]) + 100  # a byte inside the stored summaries.json (the last copy)
    swapped = b"1" if data[at : at + 1] == b"0" else b"0"
    bad.write_bytes(data[:at] + swapped + data[at + 1 :])
    with pytest.raises(SourceReadError, match="CRC mismatch in zip member 'summaries.json'"):
        read_inspect_log(bad)


# -- 200k samples -----------------------------------------------------------------------------------

#: Peak RSS allowed for a fresh interpreter that ingests the 200k-sample log with ``ingest_paths``.
#: Measured on the development machine (Python 3.11, inspect_ai 0.3.285, 2 CPUs): ~475 MiB in all,
#: ~110 MiB of it imports (~100 MiB more when inspect_ai is imported during the read) and ~250 MiB
#: the partition consolidation, which holds the partition's rows as one frame (ingest/__init__.py);
#: the reader itself adds ~60 MiB (benchmarks/). The previous reader, which held every sample
#: summary as inspect_ai objects, peaked at ~1650 MiB on the same log: holding the summaries alone
#: costs ~1.1 GiB. 900 MiB leaves ~1.9x headroom for a noisy machine and still fails if summaries
#: are held again.
PEAK_RSS_CAP_MIB = 900

_INGEST_CHILD = textwrap.dedent(
    """
    import json, sys, tempfile, time
    from pathlib import Path
    from evalpipeline.ingest import ingest_paths
    from evalpipeline.lake import Lake

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as lake:
        report = ingest_paths([Path(sys.argv[1])], Lake(Path(lake)))
    print(json.dumps({
        "seconds": time.perf_counter() - start,
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork+exec, so the child would
        # report the parent's (pytest's, ~2 GiB late in a full run) footprint as its own.
        "peak_mib": next(int(line.split()[1]) for line in open("/proc/self/status")
                         if line.startswith("VmHWM:")) / 1024,
        "errors": [e.error for e in report.file_errors],
        "accounts": [
            {k: getattr(a, k) for k in ("rows_read", "rows_ingested", "rows_quarantined", "rows_errored")}
            for a in report.partitions.values()
        ],
        "reasons": report.quarantine_reasons,
    }))
    """
)


@pytest.mark.slow
def test_200k_log_ingests_in_bounded_memory(log_200k):
    # A minimal environment: the reader's memory, not whatever earlier tests left in os.environ.
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", _INGEST_CHILD, str(log_200k)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=1200,
    )  # a hang guard, not a speed target
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["errors"] == []
    (account,) = result["accounts"]
    errored = 200_000 // syn.ERROR_EVERY
    assert (account["rows_read"], account["rows_ingested"], account["rows_quarantined"]) == (200_000, 200_000, 0)
    assert account["rows_errored"] == errored
    assert result["peak_mib"] < PEAK_RSS_CAP_MIB, result
