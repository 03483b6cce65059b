"""Settings of the HIP-LLM reliability assessment: credal box, numerics, operational profile.

Source: the HIP-LLM paper,
Section 3.2 (the hierarchy and the credal set, Eq. 4), Remark 6 (elicitation,
Eqs. 7-8), Section 4.2 "Baseline Experimental Configuration" and Appendix B
(default numerics), footnote 21 (flat operational profile OP_ij = W_i Omega_ij).

Shape-rate warning (paper footnote 16): nu_i ~ Gamma(c_i, rate = d_i), so
E[nu_i] = c_i / d_i and Var[nu_i] = c_i / d_i**2. Libraries that take a
*scale* (scipy.stats.gamma, numpy's ``gamma``) need ``scale = 1 / d``;
numpyro's ``Gamma(concentration, rate)`` takes the rate directly. Every
function in this package uses the rate.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

WEIGHT_TOLERANCE = 1e-6  # declared weights must sum to 1 within this


@dataclass(frozen=True)
class HyperBox:
    """The admissible set A_i of Eq. 4: intervals for (a, b, c, d) of one domain.

    mu_i ~ Beta(a, b) and nu_i ~ Gamma(c, rate = d). The paper's default
    (Section 4.2, Appendix B) is a, b in [1, 12] and c, d in [1, 25]. An
    interval with equal ends is a precise value; a box with all four
    intervals degenerate is a single (precise) prior.
    """

    a: tuple[float, float] = (1.0, 12.0)
    b: tuple[float, float] = (1.0, 12.0)
    c: tuple[float, float] = (1.0, 25.0)
    d: tuple[float, float] = (1.0, 25.0)

    def __post_init__(self) -> None:
        for name in ("a", "b", "c", "d"):
            value = getattr(self, name)
            try:
                low, high = (float(v) for v in value)
            except (TypeError, ValueError):
                raise ValueError(f"HyperBox.{name} must be a (low, high) pair of numbers, got {value!r}") from None
            if not (math.isfinite(low) and math.isfinite(high)) or low <= 0:
                raise ValueError(f"HyperBox.{name} = {value!r}: bounds must be finite and > 0")
            if low > high:
                raise ValueError(f"HyperBox.{name} = {value!r}: low > high")
            object.__setattr__(self, name, (low, high))

    @classmethod
    def point(cls, a: float, b: float, c: float, d: float) -> HyperBox:
        """A degenerate box: one precise hyperprior (a, b, c, d)."""
        return cls((a, a), (b, b), (c, c), (d, d))

    def bounds(self) -> np.ndarray:
        """4 x 2 array of (low, high) for a, b, c, d."""
        return np.array([self.a, self.b, self.c, self.d], dtype=float)

    def corners(self) -> np.ndarray:
        """The distinct corners of the box (16 when no interval is degenerate), as rows (a, b, c, d)."""
        grids = np.meshgrid(*[np.unique(np.array(iv)) for iv in (self.a, self.b, self.c, self.d)], indexing="ij")
        return np.stack([g.ravel() for g in grids], axis=1)

    def replace(self, **intervals: tuple[float, float]) -> HyperBox:
        return dataclasses.replace(self, **intervals)


def elicit(r: float, s: float, e: float, f: float) -> tuple[float, float, float, float]:
    """Remark 6, Eqs. 7-8: expert beliefs (r, s, e, f) -> hyperparameters (a, b, c, d).

    r in (0, 1): expected domain reliability E[mu] and s > 0 its strength
    (prior pseudo-observations): a = r s, b = (1 - r) s.
    e > 0: expected clustering strength E[nu] and f > 0 the confidence in it:
    c = f, d = f / e (a *rate*, so E[nu] = c / d = e).
    """
    _check_belief(r, s, e, f)
    return r * s, (1.0 - r) * s, f, f / e


def elicit_box(r, s, e, f) -> HyperBox:
    """Remark 6 with interval beliefs: each of r, s, e, f a number or a (low, high) pair.

    The maps of :func:`elicit` are monotone in each argument (a increases in
    r and s; b decreases in r, increases in s; d decreases in e, increases in
    f), so the image of the belief box is spanned by its corners. The paper's
    example r in [0.8, 0.9], s in [30, 100], e in [30, 100], f in [3, 10]
    gives a in [24, 90], b in [3, 20], c in [3, 10], d in [0.03, 0.33].
    """
    (r0, r1), (s0, s1), (e0, e1), (f0, f1) = (_interval(name, v) for name, v in zip("rsef", (r, s, e, f)))
    _check_belief(r0, s0, e0, f0)
    _check_belief(r1, s1, e1, f1)
    return HyperBox(a=(r0 * s0, r1 * s1), b=((1 - r1) * s0, (1 - r0) * s1), c=(f0, f1), d=(f0 / e1, f1 / e0))


def beliefs(a: float, b: float, c: float, d: float) -> tuple[float, float, float, float]:
    """Inverse of :func:`elicit`: (a, b, c, d) -> (r, s, e, f)."""
    if min(a, b, c, d) <= 0:
        raise ValueError(f"hyperparameters must be > 0, got a={a}, b={b}, c={c}, d={d}")
    return a / (a + b), a + b, c / d, c


def _interval(name: str, value) -> tuple[float, float]:
    if np.ndim(value) == 0:
        return float(value), float(value)
    low, high = (float(v) for v in value)
    if low > high:
        raise ValueError(f"belief interval {name} = {value!r}: low > high")
    return low, high


def _check_belief(r: float, s: float, e: float, f: float) -> None:
    if not 0.0 < r < 1.0:
        raise ValueError(f"r (expected reliability) must lie in (0, 1), got {r}")
    for name, value in (("s", s), ("e", e), ("f", f)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")


@dataclass(frozen=True)
class OperationalProfile:
    """Operational-profile weights: W_i per domain and Omega_ij within each domain.

    ``None`` (the default for either part) means proportional to the number
    of evaluated tasks N, as in the paper's experiments (Section 4.2, "OPs").
    Declared weights must name every domain (or every subdomain of a domain)
    present in the counts, be >= 0 and sum to 1. Domains missing from
    ``subdomain_weights`` get weights proportional to N. The flat form
    OP_ij = W_i Omega_ij (footnote 21) is accepted by :meth:`flat`.
    """

    domain_weights: Mapping[str, float] | None = None
    subdomain_weights: Mapping[str, Mapping[str, float]] | None = None

    @classmethod
    def flat(cls, weights: Mapping[tuple[str, str], float]) -> OperationalProfile:
        """From OP_ij keyed by (domain, subdomain): W_i = sum_j OP_ij, Omega_ij = OP_ij / W_i.

        Every (domain, subdomain) of the counts must be listed (zeros
        allowed); the OP_ij must sum to 1. A domain with W_i = 0 keeps
        within-domain weights proportional to N (they do not affect p_L).
        """
        domains: dict[str, dict[str, float]] = {}
        for key, value in weights.items():
            if not (isinstance(key, tuple) and len(key) == 2):
                raise ValueError(f"flat operational profile keys must be (domain, subdomain) pairs, got {key!r}")
            domains.setdefault(str(key[0]), {})[str(key[1])] = _weight(value, f"OP{key!r}")
        _check_sum(sum(w for d in domains.values() for w in d.values()), "flat operational profile OP_ij")
        totals = {d: sum(ws.values()) for d, ws in domains.items()}
        within = {d: {s: w / totals[d] for s, w in ws.items()} for d, ws in domains.items() if totals[d] > 0}
        return cls(domain_weights=totals, subdomain_weights=within)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any] | None) -> OperationalProfile:
        """From configuration: ``{"domains": {d: W}, "subdomains": {d: {s: Omega}}}`` or ``{"flat": {"d/s": OP}}``."""
        if not mapping:
            return cls()
        unknown = set(mapping) - {"domains", "subdomains", "flat"}
        if unknown:
            raise ValueError(
                f"operational profile: unknown keys {sorted(unknown)} (expected domains, subdomains or flat)"
            )
        if "flat" in mapping:
            if set(mapping) != {"flat"}:
                raise ValueError("operational profile: 'flat' cannot be combined with 'domains'/'subdomains'")
            flat = {}
            for key, value in mapping["flat"].items():
                if "/" not in key:
                    raise ValueError(f"operational profile flat key {key!r} must be 'domain/subdomain'")
                domain, subdomain = key.split("/", 1)
                flat[(domain, subdomain)] = value
            return cls.flat(flat)
        return cls(domain_weights=mapping.get("domains"), subdomain_weights=mapping.get("subdomains"))

    def resolve(self, counts: pd.DataFrame) -> pd.DataFrame:
        """Weights for the (domain, subdomain) cells of validated counts.

        Returns the counts (sorted by domain, subdomain) with ``omega``
        (Omega_ij), ``domain_weight`` (W_i) and ``op`` (W_i Omega_ij).
        """
        frame = counts.sort_values(["domain", "subdomain"], kind="stable").reset_index(drop=True)
        domains = sorted(frame["domain"].unique())
        n_by_domain = frame.groupby("domain")["n"].sum()
        if self.domain_weights is None:
            w = {d: float(n_by_domain[d]) for d in domains}
            total = sum(w.values())
            domain_w = {d: (w[d] / total if total > 0 else 1.0 / len(domains)) for d in domains}
        else:
            declared = {str(k): _weight(v, f"domain weight {k!r}") for k, v in self.domain_weights.items()}
            unknown = sorted(set(declared) - set(domains))
            if unknown:
                raise ValueError(f"operational profile names unknown domain(s) {unknown}; known: {domains}")
            missing = sorted(set(domains) - set(declared))
            if missing:
                raise ValueError(f"operational profile gives no weight for domain(s) {missing}")
            _check_sum(sum(declared.values()), "domain weights W_i")
            domain_w = {d: declared[d] for d in domains}
        declared_sub = {str(k): v for k, v in (self.subdomain_weights or {}).items()}
        unknown = sorted(set(declared_sub) - set(domains))
        if unknown:
            raise ValueError(
                f"operational profile has subdomain weights for unknown domain(s) {unknown}; known: {domains}"
            )
        omega = np.empty(len(frame))
        for domain, rows in frame.groupby("domain", sort=True).groups.items():
            subs = frame.loc[rows, "subdomain"].tolist()
            if domain in declared_sub:
                ws = {str(k): _weight(v, f"subdomain weight {domain!r}/{k!r}") for k, v in declared_sub[domain].items()}
                unknown_s = sorted(set(ws) - set(subs))
                if unknown_s:
                    raise ValueError(
                        f"operational profile names unknown subdomain(s) {unknown_s} in domain {domain!r}; known: {subs}"
                    )
                missing_s = sorted(set(subs) - set(ws))
                if missing_s:
                    raise ValueError(
                        f"operational profile gives no weight for subdomain(s) {missing_s} of domain {domain!r}"
                    )
                _check_sum(sum(ws.values()), f"subdomain weights Omega of domain {domain!r}")
                omega[rows] = [ws[s] for s in subs]
            else:
                n = frame.loc[rows, "n"].to_numpy(dtype=float)
                omega[rows] = n / n.sum() if n.sum() > 0 else 1.0 / len(n)
        frame["omega"] = omega
        frame["domain_weight"] = frame["domain"].map(domain_w).astype(float)
        frame["op"] = frame["omega"] * frame["domain_weight"]
        return frame


def _weight(value, what: str) -> float:
    try:
        w = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(w) or w < 0:
        raise ValueError(f"{what} must be finite and >= 0, got {value!r}")
    return w


def _check_sum(total: float, what: str) -> None:
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        raise ValueError(f"{what} must sum to 1, they sum to {total:.9g}")


@dataclass(frozen=True)
class ReliabilitySettings:
    """Numerics of the assessment; defaults are the paper's (Section 4.2, Appendix B).

    box: default credal box A_i (a, b in [1, 12], c, d in [1, 25]);
        ``domain_boxes`` overrides it per domain.
    n_configurations: K, hyperparameter configurations per domain; the box's
        distinct corners are always included, the rest is a Latin hypercube
        sample of the box (deterministic given ``seed``).
    n_draws: S, Monte Carlo draws per configuration.
    grid_size: G, points of the (mu, nu) integration grid; split as
        n_mu x n_nu = 40 x 50 at G = 2000, the split of the paper's
        ``settings.yaml`` (n_mu = round(sqrt(0.8 G)), n_nu = G // n_mu).
    cdf_points: T, points of each CDF envelope.
    max_pairings: cap on LLM-level configuration pairings (K_total <= 512).
    horizons: the n of E[R(n)] = E[p^n] and P(R(n) >= r).
    target: r of P(R(n) >= r).
    quantiles: probabilities of the quantile envelopes (5%, median, 95%).
    profile: operational profile (default: proportional to N).
    seed: seeds configurations, pairings and Monte Carlo draws.
    domain_seeds: a seed of its own for a domain's configurations and draws
        (default: derived from ``seed`` and the domain's position). A domain
        assessed with seed s here gets the configurations, grid and draws it
        gets alone under ``seed=s``: the lake gives a one-suite domain of a
        model the suite's own seed, so the model's and the suite's views agree.
    """

    box: HyperBox = field(default_factory=HyperBox)
    domain_boxes: Mapping[str, HyperBox] = field(default_factory=dict)
    n_configurations: int = 160
    n_draws: int = 3000
    grid_size: int = 2000
    cdf_points: int = 201
    max_pairings: int = 512
    horizons: tuple[int, ...] = (1, 2, 5, 10, 20, 60)
    target: float = 0.9
    quantiles: tuple[float, ...] = (0.05, 0.5, 0.95)
    profile: OperationalProfile = field(default_factory=OperationalProfile)
    seed: int = 0
    domain_seeds: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, minimum in (
            ("n_configurations", 1),
            ("n_draws", 2),
            ("grid_size", 4),
            ("cdf_points", 2),
            ("max_pairings", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        horizons = tuple(int(n) for n in self.horizons)
        if not horizons or any(n < 1 for n in horizons) or any(n != h for n, h in zip(horizons, self.horizons)):
            raise ValueError(f"horizons must be positive integers, got {self.horizons!r}")
        object.__setattr__(self, "horizons", tuple(sorted(set(horizons))))
        if not 0.0 < float(self.target) <= 1.0:
            raise ValueError(f"target r must lie in (0, 1], got {self.target!r}")
        if not self.quantiles or any(not 0.0 < q < 1.0 for q in self.quantiles):
            raise ValueError(f"quantiles must lie in (0, 1), got {self.quantiles!r}")
        object.__setattr__(self, "quantiles", tuple(sorted(set(float(q) for q in self.quantiles))))
        if not isinstance(self.box, HyperBox):
            raise ValueError(f"box must be a HyperBox, got {type(self.box).__name__}")
        for domain, box in self.domain_boxes.items():
            if not isinstance(box, HyperBox):
                raise ValueError(f"domain_boxes[{domain!r}] must be a HyperBox, got {type(box).__name__}")
        for domain, seed in self.domain_seeds.items():
            if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise ValueError(f"domain_seeds[{domain!r}] must be an integer >= 0, got {seed!r}")
        if not isinstance(self.profile, OperationalProfile):
            raise ValueError(f"profile must be an OperationalProfile, got {type(self.profile).__name__}")

    @property
    def grid_shape(self) -> tuple[int, int]:
        n_mu = max(2, int(round(math.sqrt(0.8 * self.grid_size))))
        return n_mu, max(2, self.grid_size // n_mu)

    def box_for(self, domain: str) -> HyperBox:
        return self.domain_boxes.get(domain, self.box)

    def replace(self, **changes) -> ReliabilitySettings:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-ready description (for metadata)."""
        out = dataclasses.asdict(self)
        out["profile"] = {
            "domain_weights": dict(self.profile.domain_weights)
            if self.profile.domain_weights is not None
            else "proportional to N",
            "subdomain_weights": {k: dict(v) for k, v in (self.profile.subdomain_weights or {}).items()},
        }
        out["grid_shape"] = list(self.grid_shape)
        return out
