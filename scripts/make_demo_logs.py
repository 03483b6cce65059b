#!/usr/bin/env python
"""Generate a small, seeded set of realistic Inspect eval logs for the demo pipeline.

What it makes
-------------
Twelve Inspect eval logs (one per model x suite) in ``--out`` (default
``data/inspect_logs`` under the repo root), plus ``--truth`` (default
``data/demo_truth.json``) holding the *planted* truth the logs were drawn from,
so the downstream analysis can be checked against known answers.

* Models: ``mockllm/atlas-large``, ``mockllm/atlas-small``, ``mockllm/borealis/v2``
  and ``mockllm/cirrus 7b``.  The extra ``/`` and the space are deliberate: they
  exercise partition-key sanitisation downstream.
* Suites (Inspect task names); every sample carries
  ``metadata={"domain": ..., "subdomain": ...}``:

  ============  ========  ==========================================  =====  ======  ======  =======
  suite         domain    subdomains                                  items  epochs  scorer  values
  ============  ========  ==========================================  =====  ======  ======  =======
  arith         math      addition, multiplication, division          25     3       match   C / I
  reading       language  short_passage, long_passage                 30     1       graded  float
  agentic_ops   agents    file_ops, web_nav, shell                    12     2       judge   C / I / P
  ============  ========  ==========================================  =====  ======  ======  =======

  ("items" is per subdomain.)  The sample contents (prompts, targets) are
  generated from the seed and are identical for every model.
* Planted truth: ``PLANTED_ACCURACY[model][subdomain]`` is the expected score of
  one attempt, counting C=1, P=0.5, I=0 and numeric scores as they are (the
  same convention as Inspect's ``accuracy()``/``mean()`` metrics):

  - ``arith``: multiple choice, options A-D (the result and three near misses,
    in a seeded order); the target is the right letter.  The attempt is right
    with probability p, else it names one of the other letters; the ``match``
    scorer's answer is the letter it reads, so the suite has the labels the
    per-class F1 tables need.
  - ``reading``: a quality q ~ Beta(p*k, (1-p)*k) is drawn (mean p); the answer
    then recalls each of the item's key facts with probability q (a wrong fact
    otherwise), and the ``graded`` scorer returns the fraction of key facts found,
    rounded to 2 decimals.  The expected score is p.
  - ``agentic_ops``: P (partial) with probability r = min(0.15, 2p, 2(1-p)),
    C with probability p - r/2, I otherwise; the expected score is p.

  Each outcome comes from a ``random.Random`` seeded with a SHA-256 hash of
  ``(seed, model, suite, sample id, epoch)`` (not Python's salted ``hash()``), so
  rerunning with the same ``--seed`` gives the same outcomes; only timestamps,
  uuids and the log file names change.  The names follow
  ``<created>_<task>_<model>_<task id>`` (``INSPECT_EVAL_LOG_FILE_PATTERN``);
  Inspect always adds the creation time and a random task id.
* The scorers really score: the solver writes a right or wrong *answer text*,
  and the scorer compares it with the target (last option letter vs target for
  ``match``; key-fact recall for ``graded``; set comparison of the reported items
  for ``judge``).
* Exactly one errored sample: ``mockllm/borealis/v2`` / ``agentic_ops`` / item
  ``agentic-web-005`` / epoch 1, where the solver raises
  ``RuntimeError("sandbox did not answer within 300s")``.  This is also what
  Inspect turns a sandbox timeout into.  A bare ``TimeoutError`` would not do:
  Inspect only logs a warning for it and scores the sample anyway.
  ``fail_on_error=False`` keeps the sample in the log with ``error`` set and no
  scores, and the log's status stays ``success``.
* Formats: ``arith`` and ``agentic_ops`` are written as ``.eval``, ``reading`` as
  ``.json``, except that ``mockllm/atlas-small``'s ``arith`` log is ``.json`` too.

Why the solver does not call ``generate``
-----------------------------------------
The script runs offline, with no model API.  Calling the ``mockllm`` provider via
``generate`` makes Inspect try to download a tokenizer (to count tokens), which
fails without internet access, and mockllm's canned reply would carry no planted
signal anyway.  So the ``planted`` solver builds the assistant reply itself with
``ModelOutput.from_content`` and stores it in ``state.output`` / ``state.messages``.
Everything else (task, dataset, epochs, scoring, metrics, log writing) is done by
Inspect as usual, so the logs have the same layout as real ones.

How to rerun
------------
From the repo root::

    python scripts/make_demo_logs.py --force

``--force`` first deletes the ``*.eval`` / ``*.json`` files in the output
folder; without it the script refuses to write into a folder that already holds
logs, so reruns never pile up duplicates.  ``.json`` logs are rewritten without
Inspect's 2-space indentation (same content and key order) to keep the demo
data small; ``--pretty-json`` keeps them as Inspect wrote them.  ``--seed`` (default 20261122) sets the planted
outcomes and sample contents.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "data" / "inspect_logs"
DEFAULT_TRUTH = REPO_ROOT / "data" / "demo_truth.json"
DEFAULT_SEED = 20261122

MODELS = [
    "mockllm/atlas-large",
    "mockllm/atlas-small",
    "mockllm/borealis/v2",
    "mockllm/cirrus 7b",
]

# Expected score of one attempt per (model, subdomain): each model has a base
# level (atlas-large ~0.85, atlas-small ~0.6, borealis/v2 ~0.72, cirrus 7b ~0.45)
# moved by up to +-0.1 by subdomain.  Values stay within [0.3, 0.95].
PLANTED_ACCURACY: dict[str, dict[str, float]] = {
    "mockllm/atlas-large": {
        "addition": 0.94,
        "multiplication": 0.88,
        "division": 0.80,
        "short_passage": 0.90,
        "long_passage": 0.79,
        "file_ops": 0.87,
        "web_nav": 0.76,
        "shell": 0.84,
    },
    "mockllm/atlas-small": {
        "addition": 0.70,
        "multiplication": 0.58,
        "division": 0.52,
        "short_passage": 0.66,
        "long_passage": 0.53,
        "file_ops": 0.62,
        "web_nav": 0.50,
        "shell": 0.57,
    },
    "mockllm/borealis/v2": {
        "addition": 0.80,
        "multiplication": 0.74,
        "division": 0.65,
        "short_passage": 0.78,
        "long_passage": 0.66,
        "file_ops": 0.75,
        "web_nav": 0.62,
        "shell": 0.80,
    },
    "mockllm/cirrus 7b": {
        "addition": 0.55,
        "multiplication": 0.42,
        "division": 0.35,
        "short_passage": 0.52,
        "long_passage": 0.38,
        "file_ops": 0.48,
        "web_nav": 0.36,
        "shell": 0.45,
    },
}

ERRORED_MODEL = "mockllm/borealis/v2"
ERRORED_SUITE = "agentic_ops"
ERRORED_ITEM = "agentic-web-005"
ERRORED_EPOCH = 1
ERRORED_MESSAGE = "sandbox did not answer within 300s"

PARTIAL_RATE = 0.15  # share of agentic_ops attempts that get partial credit
BETA_CONCENTRATION = 6.0  # k in Beta(p*k, (1-p)*k) for reading quality


# --------------------------------------------------------------------------
# Seeded randomness
# --------------------------------------------------------------------------


def stable_rng(*parts: object) -> random.Random:
    """A ``random.Random`` seeded from a SHA-256 hash of ``parts``.

    Unlike ``hash()``, this does not depend on PYTHONHASHSEED or the process.
    """
    key = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


# --------------------------------------------------------------------------
# Item generators: each returns (input, target, extra) for one sample id.
# The generators only depend on (seed, suite, sample id), never on the model.
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    id: str
    subdomain: str
    input: str
    target: str
    choices: tuple[str, ...] = ()


ARITH_TEMPLATES = [
    "What is {expr}?",
    "Compute {expr}.",
    "Calculate {expr} and give the result.",
    "{expr} = ?",
]


def make_arith(seed: int, subdomain: str, item_id: str) -> Item:
    rng = stable_rng(seed, "item", "arith", item_id)
    if subdomain == "addition":
        a, b = rng.randint(11, 499), rng.randint(11, 499)
        expr, answer = f"{a} + {b}", a + b
    elif subdomain == "multiplication":
        a, b = rng.randint(3, 29), rng.randint(3, 49)
        expr, answer = f"{a} * {b}", a * b
    else:  # division, always exact
        b, q = rng.randint(2, 19), rng.randint(2, 49)
        expr, answer = f"{b * q} / {b}", q
    prompt = rng.choice(ARITH_TEMPLATES).format(expr=expr)
    options = [answer]
    while len(options) < len(LETTERS):
        wrong = _wrong_number(rng, answer)
        if wrong > 0 and wrong not in options:
            options.append(wrong)
    rng.shuffle(options)
    listed = "\n".join(f"{letter}) {value}" for letter, value in zip(LETTERS, options))
    prompt = f"{prompt}\n{listed}\nReply with the letter of the right option."
    return Item(item_id, subdomain, prompt, LETTERS[options.index(answer)], tuple(str(v) for v in options))


LETTERS = "ABCD"


NAMES = [
    "Mara",
    "Tomasz",
    "Ines",
    "Kofi",
    "Yuki",
    "Priya",
    "Lars",
    "Amara",
    "Diego",
    "Selin",
    "Oren",
    "Freya",
    "Nikolai",
    "Hana",
    "Rafael",
    "Zainab",
]
JOBS = [
    "baker",
    "locksmith",
    "nurse",
    "carpenter",
    "librarian",
    "welder",
    "florist",
    "pharmacist",
    "surveyor",
    "tailor",
]
CITIES = [
    "Lisbon",
    "Tampere",
    "Valparaiso",
    "Kraków",
    "Nairobi",
    "Hobart",
    "Ghent",
    "Oaxaca",
    "Sapporo",
    "Tbilisi",
    "Quebec",
    "Porto",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
VEHICLES = ["tram", "ferry", "bicycle", "bus", "cable car", "scooter"]
PLACES = [
    "harbour",
    "flea market",
    "observatory",
    "botanical garden",
    "fish market",
    "public baths",
    "railway museum",
    "old fortress",
]

ORGS = [
    "Meridian Society",
    "Northwind Trust",
    "Halcyon Institute",
    "Cobalt Geographic",
    "Aster Foundation",
    "Polaris Guild",
]
REGIONS = [
    "the Altiplano",
    "Svalbard",
    "the Gobi",
    "Patagonia",
    "the Pamirs",
    "Baffin Island",
    "the Atacama",
    "Kamchatka",
]
LANDMARKS = [
    "Crescent Ridge",
    "the Salt Gate",
    "Mirror Lake",
    "the Black Cairn",
    "Eagle Col",
    "the Glass Falls",
    "Vesper Pass",
]
ITEMS_CARRIED = ["seismometers", "weather balloons", "ice corers", "radio beacons", "drone kits", "soil probes"]
SPONSORS = ["Ostrander Bank", "Kell Motors", "Lumen Optics", "Varga Shipping", "Brightwater Mills", "Sato Instruments"]
FINDINGS = [
    "a fossilised forest",
    "an unmapped glacier",
    "a hot spring",
    "a collapsed lava tube",
    "a colony of petrels",
    "a meteorite fragment",
]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]

READING_QUESTION = (
    "Read the passage below, then summarise it in one or two sentences. "
    "Keep every key fact ({slots}).\n\nPassage:\n{passage}"
)


def _short_facts(rng: random.Random) -> dict[str, str]:
    return {
        "name": rng.choice(NAMES),
        "job": rng.choice(JOBS),
        "city": rng.choice(CITIES),
        "day": rng.choice(DAYS),
        "vehicle": rng.choice(VEHICLES),
        "place": rng.choice(PLACES),
    }


def _long_facts(rng: random.Random) -> dict[str, str]:
    team, days = rng.sample(range(4, 40), 2)  # distinct so the recall check is unambiguous
    return {
        "year": str(rng.randint(1952, 2019)),
        "org": rng.choice(ORGS),
        "region": rng.choice(REGIONS),
        "leader": rng.choice(NAMES),
        "team": str(team),
        "carried": rng.choice(ITEMS_CARRIED),
        "landmark": rng.choice(LANDMARKS),
        "days": str(days),
        "sponsor": rng.choice(SPONSORS),
        "finding": rng.choice(FINDINGS),
        "month": rng.choice(MONTHS),
    }


FACT_POOLS: dict[str, list[str]] = {
    "name": NAMES,
    "job": JOBS,
    "city": CITIES,
    "day": DAYS,
    "vehicle": VEHICLES,
    "place": PLACES,
    "org": ORGS,
    "region": REGIONS,
    "leader": NAMES,
    "carried": ITEMS_CARRIED,
    "landmark": LANDMARKS,
    "sponsor": SPONSORS,
    "finding": FINDINGS,
    "month": MONTHS,
}


def _short_passage(f: dict[str, str]) -> str:
    return (
        f"{f['name']} has worked as a {f['job']} in {f['city']} for many years. "
        f"Every {f['day']}, before the shop opens, {f['name']} takes the {f['vehicle']} "
        f"across town to the {f['place']}, where the week's supplies are bought "
        f"and old friends are met for coffee."
    )


def _short_summary(f: dict[str, str]) -> str:
    return (
        f"{f['name']} is a {f['job']} in {f['city']} who rides the {f['vehicle']} to the {f['place']} every {f['day']}."
    )


def _long_passage(f: dict[str, str]) -> str:
    return (
        f"In {f['month']} {f['year']}, the {f['org']} sent an expedition to {f['region']} "
        f"led by {f['leader']}. The team of {f['team']} carried {f['carried']} and moved "
        f"slowly in bad weather. Funding came from {f['sponsor']}. After {f['days']} days "
        f"the group reached {f['landmark']}, the highest point of the route, and there "
        f"they discovered {f['finding']}, which made the expedition famous."
    )


def _long_summary(f: dict[str, str]) -> str:
    return (
        f"In {f['month']} {f['year']} the {f['org']} expedition to {f['region']}, led by "
        f"{f['leader']} with {f['team']} people and funded by {f['sponsor']}, carried "
        f"{f['carried']}, reached {f['landmark']} after {f['days']} days and found "
        f"{f['finding']}."
    )


def _facts_from_target(target: str) -> list[str]:
    return [t.strip() for t in target.split(";") if t.strip()]


def make_reading(seed: int, subdomain: str, item_id: str) -> Item:
    rng = stable_rng(seed, "item", "reading", item_id)
    if subdomain == "short_passage":
        facts = _short_facts(rng)
        passage = _short_passage(facts)
    else:
        facts = _long_facts(rng)
        passage = _long_passage(facts)
    assert list(facts) == (SHORT_KEYS if subdomain == "short_passage" else LONG_KEYS)
    slots = ", ".join(facts)
    prompt = READING_QUESTION.format(slots=slots, passage=passage)
    # the target lists the key facts a good summary must keep, ';'-separated
    return Item(item_id, subdomain, prompt, "; ".join(facts.values()))


SHORT_KEYS = ["name", "job", "city", "day", "vehicle", "place"]
LONG_KEYS = ["year", "org", "region", "leader", "team", "carried", "landmark", "days", "sponsor", "finding", "month"]


def _fact_dict(subdomain: str, target: str) -> dict[str, str]:
    """Map the ';'-separated key facts of a reading target back to their slots."""
    keys = SHORT_KEYS if subdomain == "short_passage" else LONG_KEYS
    return dict(zip(keys, _facts_from_target(target)))


SERVICES = [
    "nginx.service",
    "redis.service",
    "postgresql.service",
    "cron.service",
    "sshd.service",
    "docker.service",
    "rsyslog.service",
    "cups.service",
    "bluetooth.service",
    "chronyd.service",
    "haproxy.service",
    "mosquitto.service",
]
PROJECTS = ["atlas-api", "ledger", "quartz-ui", "ingest-worker", "billing", "search-svc"]
EXTS = ["bak", "tmp", "log.1", "orig", "swp"]
CATEGORIES = ["garden", "kitchen", "camping", "office", "lighting", "pet-care"]


def make_agentic(seed: int, subdomain: str, item_id: str) -> Item:
    rng = stable_rng(seed, "item", "agentic_ops", item_id)
    n = rng.randint(2, 4)
    if subdomain == "file_ops":
        proj, ext, size = rng.choice(PROJECTS), rng.choice(EXTS), rng.choice([5, 10, 25, 50])
        dirs = ["build", "out", "cache", "data/raw", "logs", "tmp"]
        answers = sorted(
            {
                f"/srv/{proj}/{rng.choice(dirs)}/{rng.choice(['core', 'index', 'dump', 'session', 'export', 'snapshot'])}-{rng.randint(1, 99)}.{ext}"
                for _ in range(n)
            }
        )
        prompt = (
            f"The workspace /srv/{proj} is running out of disk space. Find every "
            f"file ending in .{ext} that is larger than {size} MB and report their "
            f"full paths. End with 'FINAL ANSWER:' followed by a comma-separated list."
        )
    elif subdomain == "web_nav":
        cat, price = rng.choice(CATEGORIES), rng.choice([15, 20, 30, 50])
        answers = sorted({f"SKU-{rng.randint(10000, 99999)}" for _ in range(n)})
        prompt = (
            f"Using the browser, open http://shop.internal/c/{cat}, go through every "
            f"page of results and report the SKUs of all in-stock products priced "
            f"under ${price}. End with 'FINAL ANSWER:' followed by a comma-separated list."
        )
    else:  # shell
        answers = sorted(rng.sample(SERVICES, n))
        host = f"node-{rng.randint(1, 64):02d}"
        prompt = (
            f"You have a shell on {host}. Find which systemd units failed to start "
            f"during the last boot (journalctl and systemctl are available) and report "
            f"the unit names. End with 'FINAL ANSWER:' followed by a comma-separated list."
        )
    return Item(item_id, subdomain, prompt, ", ".join(answers))


# --------------------------------------------------------------------------
# Suites
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Suite:
    name: str
    domain: str
    subdomains: dict[str, str]  # subdomain -> short id prefix
    id_prefix: str
    items_per_subdomain: int
    epochs: int
    scorer: str
    score_kind: str  # "CI" | "numeric" | "CIP"
    make_item: Callable[[int, str, str], Item]


SUITES = [
    Suite(
        "arith",
        "math",
        {"addition": "add", "multiplication": "mul", "division": "div"},
        "arith",
        25,
        3,
        "match",
        "CI",
        make_arith,
    ),
    Suite(
        "reading",
        "language",
        {"short_passage": "short", "long_passage": "long"},
        "reading",
        30,
        1,
        "graded",
        "numeric",
        make_reading,
    ),
    Suite(
        "agentic_ops",
        "agents",
        {"file_ops": "file", "web_nav": "web", "shell": "shell"},
        "agentic",
        12,
        2,
        "judge",
        "CIP",
        make_agentic,
    ),
]
SUITES_BY_NAME = {s.name: s for s in SUITES}


def suite_items(suite: Suite, seed: int) -> list[Item]:
    items = []
    for subdomain, short in suite.subdomains.items():
        for i in range(1, suite.items_per_subdomain + 1):
            item_id = f"{suite.id_prefix}-{short}-{i:03d}"
            items.append(suite.make_item(seed, subdomain, item_id))
    return items


def log_format_for(model: str, suite: str) -> str:
    if suite == "reading":
        return "json"
    if suite == "arith" and model == "mockllm/atlas-small":
        return "json"
    return "eval"


# --------------------------------------------------------------------------
# Planted answers: what the "model" replies for one (sample, epoch)
# --------------------------------------------------------------------------


def _wrong_number(rng: random.Random, right: int) -> int:
    delta = rng.choice([-10, -9, -2, -1, 1, 2, 9, 10, 11, -11, 100])
    wrong = right + delta
    return wrong if wrong != right else right + 1


def answer_arith(rng: random.Random, p: float, item: Item) -> str:
    letter = item.target if rng.random() < p else rng.choice([c for c in LETTERS if c != item.target])
    value = item.choices[LETTERS.index(letter)]
    expr = re.search(r"\d+ [-+*/] \d+", item.input).group(0)
    style = rng.randrange(3)
    if style == 0:
        return letter
    if style == 1:
        return f"The answer is {letter}."
    return f"{expr} = {value}, so {letter}."


def answer_reading(rng: random.Random, p: float, item: Item) -> str:
    facts = _fact_dict(item.subdomain, item.target)
    true_values = set(facts.values())
    quality = rng.betavariate(p * BETA_CONCENTRATION, (1 - p) * BETA_CONCENTRATION)
    said = {}
    for key, value in facts.items():
        if rng.random() < quality:
            said[key] = value
            continue
        # a wrong fact of the same kind that matches none of the item's facts
        while True:
            if key in FACT_POOLS:
                cand = rng.choice(FACT_POOLS[key])
            else:
                cand = str(int(value) + rng.choice([-3, -2, -1, 1, 2, 3, 10]))
            if cand not in true_values and not any(
                re.search(rf"\b{re.escape(cand)}\b", v) or re.search(rf"\b{re.escape(v)}\b", cand) for v in true_values
            ):
                break
        said[key] = cand
    summary = _short_summary(said) if item.subdomain == "short_passage" else _long_summary(said)
    return f"Summary: {summary}"


def judge_outcome(rng: random.Random, p: float) -> str:
    partial = min(PARTIAL_RATE, 2 * p, 2 * (1 - p))
    u = rng.random()
    if u < p - partial / 2:
        return "C"
    if u < p + partial / 2:
        return "P"
    return "I"


def answer_agentic(rng: random.Random, p: float, item: Item) -> str:
    expected = [t.strip() for t in item.target.split(",")]
    outcome = judge_outcome(rng, p)
    if outcome == "C":
        reported = list(expected)
        rng.shuffle(reported)
        preamble = "I inspected the environment step by step and verified each result."
    elif outcome == "P":
        reported = rng.sample(expected, rng.randint(1, len(expected) - 1))
        preamble = "I found some of the matches before running out of steps."
    else:
        reported = []
        preamble = "I could not locate the requested items."
    if item.subdomain == "shell":
        decoys = [s for s in SERVICES if s not in expected]
        if outcome == "I":
            reported = rng.sample(decoys, rng.randint(1, 2))
    elif item.subdomain == "web_nav":
        if outcome == "I":
            reported = [f"SKU-{rng.randint(10000, 99999)}"]
    else:
        if outcome == "I":
            reported = [expected[0].rsplit("/", 1)[0] + f"/unrelated-{rng.randint(1, 99)}.txt"]
    reported = [r for r in reported if r not in expected] if outcome == "I" else reported
    final = ", ".join(reported) if reported else "none"
    return f"{preamble}\nFINAL ANSWER: {final}"


ANSWERERS = {"arith": answer_arith, "reading": answer_reading, "agentic_ops": answer_agentic}


# --------------------------------------------------------------------------
# Inspect task: dataset, solver, scorers
# --------------------------------------------------------------------------


def build_task(suite: Suite, seed: int):
    from inspect_ai import Task
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import (
        CORRECT,
        INCORRECT,
        PARTIAL,
        Score,
        Target,
        accuracy,
        mean,
        scorer,
        stderr,
    )
    from inspect_ai.solver import Generate, TaskState, solver

    items = suite_items(suite, seed)
    dataset = MemoryDataset(
        [
            Sample(
                id=it.id,
                input=it.input,
                target=it.target,
                choices=list(it.choices) or None,
                metadata={"domain": suite.domain, "subdomain": it.subdomain},
            )
            for it in items
        ],
        name=suite.name,
    )
    by_id = {it.id: it for it in items}

    @solver
    def planted(suite_name: str, seed: int):
        """Reply with the planted right/wrong answer, without calling generate."""

        async def solve(state: TaskState, generate: Generate) -> TaskState:
            model = str(state.model)
            sample_id = str(state.sample_id)
            if (model, suite_name, sample_id, state.epoch) == (
                ERRORED_MODEL,
                ERRORED_SUITE,
                ERRORED_ITEM,
                ERRORED_EPOCH,
            ):
                # RuntimeError, not TimeoutError: Inspect treats a bare TimeoutError
                # reaching the top of the sample as a stray timeout, logs a warning
                # and *scores* the sample instead of marking it errored.
                raise RuntimeError(ERRORED_MESSAGE)
            item = by_id[sample_id]
            p = PLANTED_ACCURACY[model][item.subdomain]
            rng = stable_rng(seed, model, suite_name, sample_id, state.epoch)
            content = ANSWERERS[suite_name](rng, p, item)
            state.output = ModelOutput.from_content(model=model, content=content)
            state.messages.append(state.output.message)
            return state

        return solve

    @scorer(metrics=[accuracy(), stderr()], name="match")
    def match_scorer():
        async def score(state: TaskState, target: Target) -> Score:
            text = state.output.completion
            letters = re.findall(r"\b[A-Z]\b", text)  # the option letter the reply ends on
            answer = letters[-1] if letters else ""
            ok = answer == target.text.strip()
            return Score(value=CORRECT if ok else INCORRECT, answer=answer, explanation=text)

        return score

    @scorer(metrics=[mean(), stderr()], name="graded")
    def graded_scorer():
        async def score(state: TaskState, target: Target) -> Score:
            text = state.output.completion
            facts = _facts_from_target(target.text)
            found = [f for f in facts if re.search(rf"\b{re.escape(f)}\b", text, re.IGNORECASE)]
            missing = [f for f in facts if f not in found]
            value = round(len(found) / len(facts), 2)
            return Score(
                value=value,
                answer="; ".join(found),
                explanation=f"{len(found)}/{len(facts)} key facts recalled"
                + (f"; missing: {', '.join(missing)}" if missing else ""),
            )

        return score

    @scorer(metrics=[accuracy(), stderr()], name="judge")
    def judge_scorer():
        async def score(state: TaskState, target: Target) -> Score:
            text = state.output.completion
            m = re.search(r"FINAL ANSWER:\s*(.*)", text)
            reported = {r.strip() for r in (m.group(1) if m else "").split(",")} - {"", "none"}
            expected = {t.strip() for t in target.text.split(",")}
            hit = reported & expected
            if reported == expected:
                value, why = CORRECT, "all expected items reported, nothing extra"
            elif hit:
                value, why = PARTIAL, f"{len(hit)}/{len(expected)} expected items reported"
            else:
                value, why = INCORRECT, "none of the expected items reported"
            return Score(value=value, answer=", ".join(sorted(reported)), explanation=why)

        return score

    scorers = {"match": match_scorer, "graded": graded_scorer, "judge": judge_scorer}
    return Task(
        dataset=dataset,
        solver=planted(suite.name, seed),
        scorer=scorers[suite.scorer](),
        epochs=suite.epochs,
        name=suite.name,
        metadata={"demo": True, "seed": seed, "domain": suite.domain},
    )


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def truth_document(seed: int) -> dict:
    return {
        "seed": seed,
        "accuracy": PLANTED_ACCURACY,
        "suites": {
            s.name: {
                "domain": s.domain,
                "subdomains": list(s.subdomains),
                "items_per_subdomain": s.items_per_subdomain,
                "epochs": s.epochs,
                "scorer": s.scorer,
                "score_kind": s.score_kind,
            }
            for s in SUITES
        },
        "errored": [{"model": ERRORED_MODEL, "suite": ERRORED_SUITE, "item_id": ERRORED_ITEM, "epoch": ERRORED_EPOCH}],
    }


def compact_json_log(path: Path) -> None:
    """Rewrite an Inspect ``.json`` log without indentation (same content, same key order).

    Inspect writes ``.json`` logs with ``indent=2``; for these ~10k-line files the
    whitespace is about a third of the size.  Inspect's readers parse the file as
    plain JSON (a streaming parser for ``header_only``), so the layout does not matter.
    """
    data = json.loads(path.read_bytes())
    path.write_bytes(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def prepare_out_dir(out: Path, force: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    existing = sorted(p for p in out.iterdir() if p.is_file() and p.suffix in (".eval", ".json"))
    if existing and not force:
        sys.exit(f"{out} already holds {len(existing)} log file(s); rerun with --force to delete them first.")
    for p in existing:
        p.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate seeded demo Inspect eval logs with planted truth.")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output folder for the logs (default: data/inspect_logs)"
    )
    parser.add_argument(
        "--truth",
        type=Path,
        default=DEFAULT_TRUTH,
        help="where to write the planted truth (default: data/demo_truth.json)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"seed for contents and outcomes (default: {DEFAULT_SEED})"
    )
    parser.add_argument("--force", action="store_true", help="delete existing *.eval / *.json files in --out first")
    parser.add_argument(
        "--pretty-json",
        action="store_true",
        help="keep Inspect's indented layout for .json logs (default: rewrite them compactly to save space)",
    )
    args = parser.parse_args(argv)

    out: Path = args.out if args.out.is_absolute() else REPO_ROOT / args.out
    truth: Path = args.truth if args.truth.is_absolute() else REPO_ROOT / args.truth
    prepare_out_dir(out, args.force)

    # File names: <created>_<task>_<model>_<random id>.<ext>.  Inspect always
    # prefixes the creation time (and .json logs are only recognised as logs when
    # their name starts with it), so names cannot be fully deterministic.
    os.environ.setdefault("INSPECT_EVAL_LOG_FILE_PATTERN", "{task}_{model}_{id}")

    from inspect_ai import eval as inspect_eval

    for suite in SUITES:
        for model in MODELS:
            fmt = log_format_for(model, suite.name)
            [log] = inspect_eval(
                build_task(suite, args.seed),
                model=model,
                log_dir=str(out),
                log_format=fmt,
                display="none",
                fail_on_error=False,
                score_display=False,
            )
            if fmt == "json" and not args.pretty_json:
                compact_json_log(Path(log.location))
            errors = sum(1 for s in (log.samples or []) if s.error)
            print(
                f"{log.status:8s} {suite.name:12s} {model:22s} {fmt:4s} "
                f"samples={len(log.samples or [])} errors={errors} "
                f"-> {Path(log.location).name}"
            )

    truth.parent.mkdir(parents=True, exist_ok=True)
    truth.write_text(json.dumps(truth_document(args.seed), indent=2) + "\n")
    total = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(f"wrote {truth} ; {out} holds {total / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
