"""Warm starts: refit a GLM from where its previous fit's chains ended.

When one model joins a suite, the suite GLMs are refitted to data that differ from the previous
fit's by one LLM in a hundred. A cold refit spends two thirds of its leapfrog steps on warmup
(adapting step size and mass matrix from dispersed starts). A warm refit continues each chain
from the previous fit's same chain's last position, with the previous fit's adapted inverse mass
matrix and step size kept fixed (by default the mean over its chains, ``FitSettings.warm_tuning``;
see :func:`arguments`), and only ``FitSettings.warm_burn_in`` iterations of burn-in before the
draws are kept: at 100 LLMs x 200 tasks about half a cold refit's leapfrog steps, with posterior means within 0.07 posterior SDs of the cold refit's.

This is what Stan users do with a previous fit's inits, metric and step size. The chains do not
start dispersed, so r-hat has less power to detect a chain stuck away from the others; the
previous fit's chains did start dispersed and passed the gates, and the warm fit must pass the
same gates (``fit.fit_glm`` refits cold when it does not).

A :class:`WarmStart` is labelled: each coordinate carries the labels of its axes (LLM, task,
subdomain...), so it can start a fit whose LLMs, tasks or padded layout differ. A coordinate the
previous fit did not have (the joining LLM) starts at the median of its site's other coordinates
in that chain, with their median inverse mass; padded slots (prior-only) start at 0 with inverse
mass 1. The dense block (the group-mean basis's collective directions) is kept only when its
labels are unchanged. Stored as JSON (``to_json``): numbers and labels, nothing pickled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

import numpy as np

FORMAT = 1


class WarmStartMismatch(ValueError):
    """The stored state cannot start this fit (the reason says why); the fit starts cold."""


@dataclass(frozen=True)
class WarmStart:
    """Where a fit's chains ended: per chain, the last position and adapted inverse mass matrix of
    every site on the unconstrained scale (real coordinates only, labelled) and the step size."""

    glm: str
    options: dict
    step_size: list[float]
    #: site -> {"axes": [...], "labels": [[label, ...] per axis], "shape": [...real shape...],
    #:          "position": [[...] per chain], "inverse_mass": [[...] per chain] or None (in the block)}
    sites: dict
    #: {"sites": [...], "inverse_mass": [[[...]]] per chain} or None
    block: dict | None

    @property
    def chains(self) -> int:
        return len(self.step_size)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "glm": self.glm,
                "options": self.options,
                "step_size": self.step_size,
                "sites": self.sites,
                "block": self.block,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes, source: str = "warm-start state") -> "WarmStart":
        try:
            record = json.loads(raw)
            if record.get("format") != FORMAT:
                raise WarmStartMismatch(f"{source}: format {record.get('format')!r}, this code reads {FORMAT}")
            return cls(
                str(record["glm"]),
                dict(record["options"]),
                [float(x) for x in record["step_size"]],
                dict(record["sites"]),
                record["block"],
            )
        except WarmStartMismatch:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise WarmStartMismatch(f"{source} is not a warm-start state: {exc}") from exc


def _options_json(options: dict) -> dict:
    return json.loads(json.dumps(options, sort_keys=True, default=str))


def _real_region(axes, real_sizes: dict, padded_shape) -> tuple:
    """The index of a site's real coordinates in its padded array (the leading ones of each labelled axis)."""
    if not axes:
        return tuple(slice(None) for _ in padded_shape)
    return tuple(slice(0, real_sizes[a]) for a in axes) + tuple(slice(None) for _ in padded_shape[len(axes) :])


def capture(
    out: dict,
    name: str,
    options: dict,
    shapes: dict,
    block: tuple[str, ...],
    axes_of: Callable[[str], tuple],
    labels_of: Callable[[str], list],
) -> WarmStart | None:
    """The warm-start state of a sampler's output (``fit._build_runner``'s ``last_z``, ``inverse_mass``
    and ``final_step_size``, on the host). ``shapes``: each site's padded shape; ``axes_of``: a site's
    labelled axes (``glm.site_axes``); ``labels_of``: an axis's real labels. None when the output has
    no such state or its dense block holds padded coordinates (which cannot be labelled)."""
    if "last_z" not in out:
        return None
    real_sizes: dict = {}
    sites: dict = {}
    for site, shape in shapes.items():
        axes = tuple(axes_of(site))
        if len(axes) > len(shape):
            return None
        labels = [[str(x) for x in labels_of(a)] for a in axes]
        for a, names in zip(axes, labels):
            real_sizes[a] = len(names)
        region = _real_region(axes, real_sizes, shape)
        real = np.asarray(out["last_z"][site])[(slice(None),) + region]
        sites[site] = {
            "axes": list(axes),
            "labels": labels,
            "shape": list(real.shape[1:]),
            "position": real.reshape(real.shape[0], -1).astype(float).tolist(),
            "inverse_mass": None,
        }
    chains = len(np.asarray(out["final_step_size"]))
    block_record = None
    for key, values in out["inverse_mass"].items():
        members = key.split("|")
        values = np.asarray(values)
        if values.ndim == 3:  # a dense block: (chains, k, k) over its sites' padded coordinates
            if any(sites[s]["shape"] != list(shapes[s]) for s in members):
                return None
            block_record = {"sites": members, "inverse_mass": values.astype(float).tolist()}
            continue
        offset = 0
        for site in members:
            shape = shapes[site]
            size = int(np.prod(shape))
            padded = values[:, offset : offset + size].reshape((chains,) + tuple(shape))
            offset += size
            record = sites[site]
            region = _real_region(record["axes"], {a: len(l) for a, l in zip(record["axes"], record["labels"])}, shape)
            record["inverse_mass"] = padded[(slice(None),) + region].reshape(chains, -1).astype(float).tolist()
    if any(
        r["inverse_mass"] is None and (block_record is None or s not in block_record["sites"]) for s, r in sites.items()
    ):
        return None
    return WarmStart(
        name, _options_json(options), np.asarray(out["final_step_size"], float).tolist(), sites, block_record
    )


def arguments(
    state: WarmStart,
    name: str,
    options: dict,
    shapes: dict,
    block: tuple[str, ...],
    labels_of: Callable[[str], list],
    chains: int,
    *,
    pooled: bool = False,
):
    """The warm runner's extra arguments (``fit._build_runner``): ``starts``, ``diagonals``,
    ``block_mass`` and ``step_size``, each with a leading chain axis, laid out for this fit (its
    labels and padded shapes). Raises :class:`WarmStartMismatch` when the state cannot start it.

    ``pooled`` (``FitSettings.warm_tuning = "pooled"``): every chain gets the mean over the chains of
    the inverse mass matrices (diagonals and dense block) and of the step sizes; each keeps its own
    position. Each chain's adaptation is a noisy estimate of the same quantities, and a chain keeps a
    warm start's tuning night after night: one chain with a step size 20% smaller than the others' can
    run five times the leapfrog steps a draw and take most of the refit's sampler time."""
    if state.glm != name:
        raise WarmStartMismatch(f"the stored state is of {state.glm!r}, not {name!r}")
    if state.options != _options_json(options):
        changed = sorted(
            k
            for k in set(state.options) | set(_options_json(options))
            if state.options.get(k) != _options_json(options).get(k)
        )
        raise WarmStartMismatch(f"the model's structure changed since the stored state ({', '.join(changed)})")
    if state.chains != chains:
        raise WarmStartMismatch(f"the stored state has {state.chains} chains, this fit runs {chains}")
    if set(state.sites) != set(shapes):
        raise WarmStartMismatch(
            f"the model's sites changed since the stored state: {sorted(set(state.sites) ^ set(shapes))}"
        )
    if (state.block["sites"] if state.block else []) != list(block):
        raise WarmStartMismatch("the dense mass block changed since the stored state")
    step = np.asarray(state.step_size, np.float64)
    if not np.all(np.isfinite(step) & (step > 0)):
        raise WarmStartMismatch("the stored step sizes are not all positive and finite")
    starts, diagonals = {}, {}
    for site, shape in shapes.items():
        record = state.sites[site]
        axes = tuple(record["axes"])
        new_labels = [[str(x) for x in labels_of(a)] for a in axes]
        old_shape = tuple(record["shape"])
        position = np.asarray(record["position"], np.float64).reshape((chains,) + old_shape)
        if site in block:
            if [list(map(str, l)) for l in record["labels"]] != new_labels or old_shape != tuple(shape):
                raise WarmStartMismatch(
                    f"the labels of {site!r}, in the dense mass block, changed since the stored state"
                )
            starts[site] = position.astype(np.float32)
            continue
        mass = np.asarray(record["inverse_mass"], np.float64).reshape((chains,) + old_shape)
        starts[site], inverse = _relabel(
            site, position, mass, axes, record["labels"], new_labels, old_shape, tuple(shape), chains
        )
        diagonals[site] = inverse.reshape(chains, -1)  # numpyro's per-site diagonal: a vector, also for a scalar
    block_mass = np.zeros((chains, 0, 0), np.float32)
    if block:
        block_mass = np.asarray(state.block["inverse_mass"], np.float32)
        size = sum(int(np.prod(shapes[s])) for s in block)
        if block_mass.shape != (chains, size, size):
            raise WarmStartMismatch(f"the stored dense block is {block_mass.shape[1:]}, this fit's is {(size, size)}")
    for what, values in (("positions", starts), ("inverse masses", diagonals)):
        if not all(np.all(np.isfinite(v)) for v in values.values()):
            raise WarmStartMismatch(f"the stored {what} are not all finite")
    if not np.all(np.isfinite(block_mass)):
        raise WarmStartMismatch("the stored dense block is not finite")
    if pooled:
        diagonals = {site: _pool(values) for site, values in diagonals.items()}
        block_mass, step = _pool(block_mass), _pool(step)
    return starts, diagonals, block_mass, step.astype(np.float32)


def _pool(per_chain: np.ndarray) -> np.ndarray:
    """The mean over the leading (chain) axis, given to every chain. The mean of variance estimates
    (an inverse mass matrix estimates the posterior covariance) estimates the same variance with
    less noise, and stays positive definite."""
    values = np.asarray(per_chain)
    mean = np.mean(values.astype(np.float64), axis=0, keepdims=True)
    return np.broadcast_to(mean, values.shape).astype(values.dtype)


def _relabel(site, position, mass, axes, old_labels, new_labels, old_shape, shape, chains):
    """One site's start and diagonal inverse mass in the new layout (see the module docstring)."""
    start = np.zeros((chains,) + shape, np.float64)
    inverse = np.ones((chains,) + shape, np.float64)
    if not axes:
        if old_shape != shape:
            raise WarmStartMismatch(f"site {site!r} changed shape since the stored state: {old_shape} -> {shape}")
        return position.astype(np.float32), mass.astype(np.float32)
    trailing = old_shape[len(axes) :]
    if trailing != shape[len(axes) :] or any(len(n) > s for n, s in zip(new_labels, shape)):
        raise WarmStartMismatch(f"site {site!r} changed shape since the stored state")
    index = [
        np.array([{str(l): i for i, l in enumerate(old)}.get(l, -1) for l in new], np.int64)
        for old, new in zip(old_labels, new_labels)
    ]
    known = np.ones(tuple(len(i) for i in index), bool)
    for axis, i in enumerate(index):
        known &= (i >= 0).reshape((1,) * axis + (-1,) + (1,) * (len(index) - axis - 1))
    grid = np.ix_(*[np.maximum(i, 0) for i in index])
    region = tuple(slice(0, len(i)) for i in index)
    for target, values in ((start, position), (inverse, mass)):
        for c in range(chains):
            old = values[c]
            fill = float(np.median(old)) if old.size else (0.0 if target is start else 1.0)
            taken = old[grid] if old.size else np.full(known.shape + trailing, fill)
            mask = known.reshape(known.shape + (1,) * len(trailing))
            target[c][region] = np.where(mask, taken, fill)
    return start.astype(np.float32), inverse.astype(np.float32)
