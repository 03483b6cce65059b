"""Glue between the canonical sample table and the HIP-LLM assessment (no Dagster here).

* :func:`counts_from_samples`: canonical samples -> (domain, subdomain, n, k).
* :func:`load_taxonomy` / :class:`Taxonomy`: the user-edited ``taxonomy.toml``
  mapping suites to HIP-LLM domains (default: one domain per suite), with an
  optional operational profile.
* :func:`model_counts`: all suites of one model -> counts over taxonomy domains.
* :func:`write_reliability`: the result tables as Parquet, written atomically,
  byte-identical on a rerun with the same inputs and seed.

What counts as a success (HIP-LLM models binary pass/fail, paper Remark 4):
a row's ``correct`` when it is logged; otherwise ``score >= success_threshold``
(default 1.0: a graded answer succeeds only with full marks, the strict
reading of "failure-free"). Rows that do not count at all (errored,
limit-hit, unscored) are dropped via
:func:`evalpipeline.stats.posteriors.countable`. Every attempt (item x
epoch) is one Bernoulli trial, as in the conjugate posteriors; repeated
epochs of an item are correlated, which this (like the paper) ignores.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from evalpipeline.lake import write_bytes_atomic, write_parquet_atomic
from evalpipeline.reliability.core import ReliabilityResult
from evalpipeline.reliability.settings import OperationalProfile
from evalpipeline.stats.posteriors import NONE, countable

#: What a reliability table's ``subdomain`` holds: a model x suite folder has the logged names, a
#: model's folder spans suites, so its labels lead with the suite (:func:`model_counts`).
SUBDOMAIN_LABEL = (
    "subdomain within the domain (model_reliability: <suite>, then /<logged domain> if the suite logs "
    "several, then /<subdomain> if it logs subdomains; e.g. arith/addition)"
)
#: HIP-LLM counts pass/fail outcomes: a graded score is a success or not, never a fraction of one.
SUCCESSES = (
    "successes among them: attempts logged correct, or scored at least [reliability] success_threshold "
    "(default 1: full marks); the leaderboards' k sums partial scores instead"
)
#: The reliability tables' domain is HIP-LLM's, which need not be the logged one.
DOMAIN_LABEL = (
    "HIP-LLM domain: the suite's domain in the taxonomy (taxonomy.toml; default the suite itself), "
    "not the samples' logged domain"
)
COUNTS_COLUMNS = {
    "domain": DOMAIN_LABEL,
    "subdomain": SUBDOMAIN_LABEL,
    "n": "trials: countable attempts (items x epochs)",
    "k": SUCCESSES,
    "n_items": "distinct items among the trials",
    "n_excluded": "attempts not counted: errored, limit-hit or unscored",
}

DEFAULT_TAXONOMY_FILE = "taxonomy.toml"


def successes(samples: pd.DataFrame, success_threshold: float = 1.0) -> pd.Series:
    """Per row: ``correct`` where logged, else ``score >= success_threshold`` (boolean)."""
    if not 0.0 < success_threshold <= 1.0:
        raise ValueError(f"success_threshold must lie in (0, 1], got {success_threshold!r}")
    by_score = samples["score"].astype(float) >= success_threshold
    if "correct" not in samples.columns:
        return by_score
    correct = samples["correct"].astype("boolean")
    return correct.fillna(by_score).astype(bool)


def counts_from_samples(
    samples: pd.DataFrame, *, success_threshold: float = 1.0, domain: str | None = None
) -> pd.DataFrame:
    """Count trials and successes per (domain, subdomain) of one model's samples.

    ``domain`` replaces the logged domain (e.g. the suite's taxonomy domain);
    missing labels become ``(none)``. Columns: see ``COUNTS_COLUMNS``.
    """
    for col in ("score", "error", "limit", "item_id"):
        if col not in samples.columns:
            raise ValueError(f"samples lack column {col!r} (canonical sample table expected)")
    frame = pd.DataFrame(
        {
            "domain": domain if domain is not None else _labels(samples, "domain"),
            "subdomain": _labels(samples, "subdomain"),
            "counts": countable(samples).to_numpy(),
            "item_id": samples["item_id"].astype(str).to_numpy(),
        },
        index=samples.index,
    )
    frame["success"] = successes(samples, success_threshold).to_numpy() & frame["counts"]
    return _aggregate(frame)


def _labels(samples: pd.DataFrame, column: str) -> pd.Series:
    if column not in samples.columns:
        return pd.Series(NONE, index=samples.index)
    return samples[column].astype("string").fillna(NONE).astype(str)


def _aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (dom, sub), part in frame.groupby(["domain", "subdomain"], sort=True):
        counted = part[part["counts"]]
        rows.append(
            (
                dom,
                sub,
                len(counted),
                int(counted["success"].sum()),
                counted["item_id"].nunique(),
                len(part) - len(counted),
            )
        )
    return pd.DataFrame(rows, columns=list(COUNTS_COLUMNS))


@dataclass(frozen=True)
class Taxonomy:
    """Suite -> HIP-LLM domain (suites not listed are a domain of their own), and an optional profile."""

    suite_domains: Mapping[str, str] = field(default_factory=dict)
    profile: OperationalProfile = field(default_factory=OperationalProfile)

    def domain_of(self, suite: str) -> str:
        return self.suite_domains.get(suite, suite)


TAXONOMY_TEMPLATE = """\
# HIP-LLM taxonomy: which domain each suite belongs to.
# Domains are modelled as independent; the subdomains of one domain (the
# suites' own subdomains, or the suites themselves) share a prior and are
# partially pooled. A suite not listed here is a domain of its own.
[suites]
# arith = "math"
# reading = "language"

# Optional operational profile (weights >= 0, each group summing to 1).
# Default: proportional to the number of evaluated attempts.
# [profile.domains]
# math = 0.3
# language = 0.7
# [profile.subdomains.math]
# "arith/addition" = 0.5
# "arith/division" = 0.5
# or, flat OP_ij = W_i * Omega_ij:
# [profile.flat]
# "math/arith/addition" = 0.2   # "domain/subdomain" = weight
"""


def load_taxonomy(path: str | Path | None) -> Taxonomy:
    """Read ``taxonomy.toml`` (see ``TAXONOMY_TEMPLATE``); a missing file or ``None`` gives the default."""
    if path is None or not Path(path).exists():
        return Taxonomy()
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"taxonomy file {path}: not valid TOML ({exc})") from None
    unknown = set(data) - {"suites", "profile"}
    if unknown:
        raise ValueError(f"taxonomy file {path}: unknown table(s) {sorted(unknown)} (expected [suites], [profile])")
    suites = data.get("suites", {})
    if not isinstance(suites, dict):
        raise ValueError(f"taxonomy file {path}: [suites] must map suite names to domain names")
    for suite, domain in suites.items():
        if not isinstance(domain, str) or not domain.strip():
            raise ValueError(
                f"taxonomy file {path}: suite {suite!r} must map to a non-empty domain name, got {domain!r}"
            )
    profile = data.get("profile", {})
    try:
        op = OperationalProfile.from_mapping(profile)
    except ValueError as exc:
        raise ValueError(f"taxonomy file {path}: {exc}") from None
    return Taxonomy(suite_domains={str(k): v.strip() for k, v in suites.items()}, profile=op)


def model_counts(
    samples_by_suite: Mapping[str, pd.DataFrame], taxonomy: Taxonomy | None = None, *, success_threshold: float = 1.0
) -> pd.DataFrame:
    """Counts of one model over taxonomy domains; the subdomains are the suites' cells.

    Each suite's rows go to ``taxonomy.domain_of(suite)``. Subdomain label:
    the suite name, then ``/<logged domain>`` if the suite logs more than one
    domain, then ``/<subdomain>`` if subdomains are logged; so suites never
    collide and a suite without subdomains is one subdomain.
    """
    taxonomy = taxonomy or Taxonomy()
    parts = []
    for suite in sorted(samples_by_suite):
        samples = samples_by_suite[suite]
        if samples.empty:
            continue
        label = pd.Series(suite, index=samples.index, dtype=object)
        logged_domain = _labels(samples, "domain")
        if logged_domain.nunique() > 1:
            label = label + "/" + logged_domain
        logged_sub = samples["subdomain"] if "subdomain" in samples.columns else pd.Series(pd.NA, index=samples.index)
        has_sub = logged_sub.notna().to_numpy()
        label = label.where(~has_sub, label + "/" + logged_sub.astype("string").fillna("").astype(str))
        parts.append(
            pd.DataFrame(
                {
                    "domain": taxonomy.domain_of(suite),
                    "subdomain": label.to_numpy(),
                    "counts": countable(samples).to_numpy(),
                    "item_id": samples["item_id"].astype(str).to_numpy(),
                    "success": successes(samples, success_threshold).to_numpy() & countable(samples).to_numpy(),
                }
            )
        )
    if not parts:
        raise ValueError("model_counts: no samples in any suite")
    return _aggregate(pd.concat(parts, ignore_index=True))


def write_reliability(result: ReliabilityResult, directory: str | Path) -> dict[str, Path]:
    """Write every table of ``result`` as ``<name>.parquet`` and ``metadata.json`` under ``directory``.

    Atomic (temporary file + rename, via :mod:`evalpipeline.lake`) and
    deterministic: the same inputs and seed give the same bytes, and
    unchanged files are not rewritten.
    """
    directory = Path(directory)
    paths = {}
    for name, table in result.tables().items():
        path = directory / f"{name}.parquet"
        write_parquet_atomic(pa.Table.from_pandas(table, preserve_index=False), path)
        paths[name] = path
    meta = json.dumps(_jsonable(result.metadata), sort_keys=True, indent=2).encode()
    write_bytes_atomic(meta, directory / "metadata.json")
    paths["metadata"] = directory / "metadata.json"
    return paths


def _jsonable(value):
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value
