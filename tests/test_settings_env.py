"""Settings read from the environment: a bad value is named, with the variable, before any work
(or fails its step at once, not after retries), and `evalpipeline run` is not stopped by an
executor choice that only the daemon's runs use."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance, materialize

from assets.automation import CRON_ENV, DEFAULT_CRON, TIMEZONE_ENV, nightly_cron
from assets.fits import PARTITION_GLM_ASSETS
from assets.partitions import model_suite_key
from evalpipeline.config import EXECUTOR_ENV
from resources.run.loop import LOG_LEVEL_ENV, _console_config, executor_note
from evalpipeline.lake.keys import to_partition_key
from evalpipeline.steps.reliability import TAXONOMY_ENV, load_reliability_config
from evalpipeline.settings import ConfigError
from resources import LakeResource
from resources.fit import CACHE_MAX_ENV, GlmSettings
from tests.conftest import REPO


def test_the_nightly_cron_and_timezone_default_when_empty_and_bad_values_are_named(monkeypatch):
    monkeypatch.setenv(CRON_ENV, "")
    monkeypatch.setenv(TIMEZONE_ENV, " ")
    assert nightly_cron() == (DEFAULT_CRON, "UTC")
    monkeypatch.setenv(CRON_ENV, "30 1 * * 1-5")
    monkeypatch.setenv(TIMEZONE_ENV, "Europe/London")
    assert nightly_cron() == ("30 1 * * 1-5", "Europe/London")
    for bad in ("bogus", "0 2 * *"):
        monkeypatch.setenv(CRON_ENV, bad)
        with pytest.raises(ValueError, match=re.escape(f"{CRON_ENV}='{bad}' is not a cron schedule")):
            nightly_cron()
    monkeypatch.setenv(CRON_ENV, DEFAULT_CRON)
    monkeypatch.setenv(TIMEZONE_ENV, "Mars/Base")
    with pytest.raises(ValueError, match=f"{TIMEZONE_ENV}='Mars/Base' is not an IANA time zone"):
        nightly_cron()


def test_an_empty_step_thread_count_means_the_default():
    from resources.executors import STEP_THREADS_ENV, limit_step_threads

    environ = {STEP_THREADS_ENV: " "}
    assert limit_step_threads(environ)["OMP_NUM_THREADS"] == "1"


def test_the_console_log_level_is_checked_and_any_case_is_accepted(monkeypatch):
    monkeypatch.setenv(LOG_LEVEL_ENV, "info")
    assert _console_config()["loggers"]["console"]["config"]["log_level"] == "INFO"
    monkeypatch.delenv(LOG_LEVEL_ENV)
    assert _console_config()["loggers"]["console"]["config"]["log_level"] == "WARNING"
    monkeypatch.setenv(LOG_LEVEL_ENV, "bogus")
    with pytest.raises(ValueError, match=f"{LOG_LEVEL_ENV}='bogus' is not a log level"):
        _console_config()


def test_the_executor_note_says_where_the_choice_applies_and_why_it_would_not_load():
    assert executor_note(None) is None and executor_note("Multiprocess") is None
    note = executor_note("bogus")
    assert "selects the executor of runs that the daemon" in note and "'bogus' is not a known executor" in note
    try:
        import dagster_k8s  # noqa: F401

        loads = True
    except ImportError:
        loads = False
    assert ("will not load for those: " in executor_note("k8s")) is not loads
    assert loads or "needs the dagster-k8s package" in executor_note("k8s")


def test_a_taxonomy_file_named_but_missing_is_an_error_the_absent_default_is_not(tmp_path, monkeypatch):
    config = tmp_path / "evalpipeline.toml"
    config.write_text("")
    monkeypatch.setenv("EVALPIPELINE_CONFIG", str(config))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(TAXONOMY_ENV, raising=False)
    assert load_reliability_config().taxonomy().suite_domains == {}  # no taxonomy.toml: one domain per suite
    monkeypatch.setenv(TAXONOMY_ENV, str(tmp_path / "no_such.toml"))
    with pytest.raises(ConfigError, match=rf"\${TAXONOMY_ENV} = '.*no_such.toml': no such taxonomy file"):
        load_reliability_config()
    config.write_text('[reliability]\ntaxonomy = "typo.toml"\n')
    with pytest.raises(ConfigError, match=r"\[reliability\] taxonomy = 'typo.toml': no such taxonomy file"):
        load_reliability_config()
    (tmp_path / "typo.toml").write_text('[suites]\narith = "math"\n')  # found beside the configuration
    assert load_reliability_config().taxonomy().suite_domains == {"arith": "math"}


def test_a_bad_cache_bound_fails_the_fit_step_at_once_without_retries(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_MAX_ENV, "abc")
    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [to_partition_key("m")])
    instance.add_dynamic_partitions("suite", [to_partition_key("s")])
    glm_asset = PARTITION_GLM_ASSETS[0]
    result = materialize(
        [glm_asset],
        partition_key=model_suite_key("m", "s"),
        instance=instance,
        raise_on_error=False,
        resources={
            "lake": LakeResource(root=str(tmp_path / "lake"), landing=str(tmp_path)),
            "glm_settings": GlmSettings(),
        },
    )
    assert not result.success
    types = [event.event_type for event in result.all_events]
    assert DagsterEventType.STEP_UP_FOR_RETRY not in types and types.count(DagsterEventType.STEP_FAILURE) == 1
    failure = next(e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE)
    assert f"${CACHE_MAX_ENV} = 'abc'" in failure.step_failure_data.error.message


def _cli_run(tmp_path, **environ) -> subprocess.CompletedProcess:
    (tmp_path / "landing").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "EVALPIPELINE_LANDING": str(tmp_path / "landing"),
        "EVALPIPELINE_LAKE": str(tmp_path / "lake"),
        "DAGSTER_HOME": str(tmp_path),
        **environ,
    }
    return subprocess.run(
        [sys.executable, "-m", "evalpipeline.cli.main", "run", "--workers", "1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_run_is_not_stopped_by_an_executor_only_the_daemon_uses(tmp_path):
    done = _cli_run(tmp_path, **{EXECUTOR_ENV: "bogus"})
    assert done.returncode == 0, done.stderr
    assert f"note: {EXECUTOR_ENV}=bogus selects the executor of runs that the daemon" in done.stdout
    assert "'bogus' is not a known executor" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "environ, message",
    [
        ({CRON_ENV: "bogus"}, f"{CRON_ENV}='bogus' is not a cron schedule"),
        ({LOG_LEVEL_ENV: "loud"}, f"{LOG_LEVEL_ENV}='loud' is not a log level"),
        ({CACHE_MAX_ENV: "abc"}, f"${CACHE_MAX_ENV} = 'abc'"),
        (
            {"EVALPIPELINE_LANDING": "/nonexistent/landing"},
            "EVALPIPELINE_LANDING='/nonexistent/landing': /nonexistent/landing is not a folder",
        ),
    ],
)
def test_cli_run_names_a_bad_setting_in_one_line_before_any_work(tmp_path, environ, message):
    done = _cli_run(tmp_path, **environ)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("evalpipeline run: ") and message in done.stderr
    assert not (tmp_path / "lake").exists()  # nothing ran


def test_cli_run_started_outside_the_repository_names_the_missing_default_landing_folder(tmp_path):
    """The default landing folder and lake are relative: a cron job started in its home folder found no
    log, made an empty lake there and exited 0."""
    env = {k: v for k, v in os.environ.items() if k not in ("EVALPIPELINE_LANDING", "EVALPIPELINE_LAKE")}
    done = subprocess.run(
        [sys.executable, "-m", "evalpipeline.cli.main", "run", "--workers", "1"],
        cwd=tmp_path,
        env={**env, "DAGSTER_HOME": str(tmp_path), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(
        "evalpipeline run: the landing folder data/inspect_logs (the default, relative to "
        f"{tmp_path}) is not a folder: run from the repository root or set "
        "EVALPIPELINE_LANDING"
    ), done.stderr
    assert not (tmp_path / "data").exists()  # nothing ran


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "[glm.priors.suite_binomal]\nsigma_model_scale = 5.0\n",
            "[glm.priors.suite_binomal]: unknown model 'suite_binomal'",
        ),
        (
            "[glm.priors.binomial]\nsigma_subdomain_scal = 0.2\n",
            "[glm.priors.binomial]: unknown prior argument(s) ['sigma_subdomain_scal']",
        ),
        ("[ingest.scores]\nvalue_mpa = { C = 1.0 }\n", "unknown keys in [ingest.scores]: ['value_mpa']"),
        ("[ingest.wide]\nsuit = 'x'\n", "unknown keys in [ingest.wide]: ['suit']"),
        ("[reliabilty]\nseed = 3\n", "unknown table(s) ['reliabilty']"),
    ],
)
def test_a_misspelt_configuration_key_is_named_not_ignored(tmp_path, text, message):
    assert message in _refusal(tmp_path / "evalpipeline.toml", text)


@pytest.mark.parametrize(
    "text, message",
    [
        # strings where TOML needs a number or a boolean: "false" would have been read as true
        (
            '[ingest]\naccept_incomplete_logs = "false"\n',
            "[ingest] accept_incomplete_logs must be true or false, got 'false'",
        ),
        ('[glm]\nstore_log_likelihood = "false"\n', "[glm] store_log_likelihood must be true or false"),
        ('[glm]\nnum_samples = "200"\n', "[glm] num_samples must be a whole number, got '200'"),
        ("[glm]\nnum_warmup = 2.5\n", "[glm] num_warmup must be a whole number, got 2.5"),
        ('[glm]\ngraded_threshold = "abc"\n', "[glm] graded_threshold must be a number"),
        ('[glm.thresholds]\nmax_r_hat = "x"\n', "[glm.thresholds] max_r_hat must be a number"),
        (
            '[glm.priors.binomial]\nsigma_subdomain_scale = "abc"\n',
            "[glm.priors.binomial] sigma_subdomain_scale must be a number",
        ),
        ('[glm.priors.binomial]\nuse_subdomain = "no"\n', "[glm.priors.binomial] use_subdomain must be true or false"),
        ('[reliability]\nsuccess_threshold = "x"\n', "[reliability] success_threshold must be a number"),
        ("[reliability]\nn_draws = 3.5\n", "[reliability] n_draws must be a whole number"),
        ('[validate]\nmax_error_share = "x"\n', "[validate] max_error_share must be a number"),
        # values out of range or not among the choices
        ('[glm]\ngraded = "fractoinal"\n', "[glm] graded must be one of ['threshold', 'fractional'], got 'fractoinal'"),
        ("[glm]\ngraded_threshold = 0.0\n", "[glm] graded_threshold must be in (0, 1]"),
        ("[glm]\ncentring_threshold = 0\n", "[glm] centring_threshold must be > 0"),
        ("[glm]\ncentring_threshold = -1.5\n", 'to centre every level, set centring = "centred"'),
        (
            "[glm.priors.binomial]\nsigma_subdomain_scale = -1.0\n",
            "sigma_subdomain_scale is a scale, rate or concentration and must be positive",
        ),
        (
            '[glm.priors.binomial]\nlikelihood = "binomail"\n',
            "[glm.priors.binomial] likelihood must be one of ['binomial', 'beta_binomial']",
        ),
        (
            '[glm.priors.binomial]\nitem_sd_concentration = "2"\n',
            "[glm.priors.binomial] item_sd_concentration must be a number",
        ),
        (
            "[glm.priors.binomial]\nitem_sd_concentration = -2.0\n",
            "item_sd_concentration is a scale, rate or concentration and must be positive",
        ),
        (
            "[glm.priors.item_difficulty]\nitem_sd_concentration = 0.0\n",
            "item_sd_concentration is a scale, rate or concentration and must be positive",
        ),
        ("[reliability]\nsuccess_threshold = 7\n", "[reliability] success_threshold must be in (0, 1]"),
        (
            '[ingest]\nformat = "inspct"\n',
            "[ingest] format must be one of ['auto', 'inspect', 'lm-eval', 'long', 'wide'], got 'inspct'",
        ),
        ('[glm]\nmodels = "binomial"\n', "[glm] models must be an array, got 'binomial'"),
        ("[glm.thresholds]\nmax_rhat = 1.1\n", "unknown keys in [glm.thresholds]: ['max_rhat']"),
        # nan and inf passed the range checks, and thresholds no fit can meet (or every fit meets) passed unchecked
        ("[posterior]\nprior_a = inf\n", "[posterior] prior_a must be a finite number, got inf"),
        ("[posterior]\nprior_b = nan\n", "[posterior] prior_b must be a finite number, got nan"),
        ("[posterior]\nhpdi_mass = nan\n", "[posterior] hpdi_mass must be a finite number, got nan"),
        ("[glm.thresholds]\nmin_ess_bulk = -1\n", "[glm.thresholds] min_ess_bulk must be at least 0"),
        ("[glm.thresholds]\nmin_ess_tail = -0.5\n", "[glm.thresholds] min_ess_tail must be at least 0"),
        ("[glm.thresholds]\nmax_divergences = -1\n", "[glm.thresholds] max_divergences must be at least 0"),
        ("[glm.thresholds]\nmax_r_hat = -1\n", "[glm.thresholds] max_r_hat must be at least 1"),
        ("[glm.thresholds]\nmax_r_hat = 0.99\n", "[glm.thresholds] max_r_hat must be at least 1"),
        ("[glm.thresholds]\nmin_bfmi = nan\n", "[glm.thresholds] min_bfmi must be a finite number, got nan"),
        ("[glm.thresholds]\nmin_bfmi = -0.1\n", "[glm.thresholds] min_bfmi must be at least 0"),
        ("[glm.thresholds]\nmax_pareto_k = inf\n", "[glm.thresholds] max_pareto_k must be a finite number, got inf"),
        ("[glm.thresholds]\nmax_pareto_k = 0\n", "[glm.thresholds] max_pareto_k must be greater than 0"),
        (
            "[glm.priors.binomial]\nsigma_subdomain_scale = inf\n",
            "sigma_subdomain_scale must be a finite number, got inf",
        ),
        ("[ingest]\nchunk_rows = 0\n", "[ingest] chunk_rows must be a whole number >= 1, got 0"),
        ("[ingest]\nchunk_rows = -5\n", "[ingest] chunk_rows must be a whole number >= 1, got -5"),
        # every reliability step failed on it: each of the box's corners is one of its configurations
        (
            "[reliability]\nn_configurations = 4\n",
            "[reliability] n_configurations must be at least the 16 distinct corners",
        ),
        (
            "[reliability]\nn_configurations = 4\n[reliability.box]\na = [1, 1]\n",
            "[reliability] n_configurations must be at least the 8 distinct corners",
        ),
        # a table that is not one
        ("glm = 3\n", "[glm] must be a table, got 3"),
        ("[glm]\npriors = 3\n", "[glm.priors] must be a table, got 3"),
        ("[ingest]\nscores = 3\n", "[ingest.scores] must be a table, got 3"),
        ("[reliability]\nbox = 3\n", "[reliability] box must be a table, got 3"),
        # each of these would otherwise be accepted, and read otherwise than written or not at all
        ('[reliability.box]\na = "12"\n', "[reliability.box] a must be an array of two numbers [low, high], got '12'"),
        ("[reliability.box]\na = 5\n", "[reliability.box] a must be an array of two numbers [low, high], got 5"),
        ("[reliability.box]\na = [1, 2, 3]\n", "[reliability.box] a must be an array of two numbers [low, high]"),
        ("[reliability.box]\ne = [1, 2]\n", "unknown keys in [reliability.box]: ['e']"),
        (
            "[reliability.domain_boxes.math]\na = [2, 8]\n",
            "[reliability] domain_boxes is not a setting: the configuration sets one credal box for every domain",
        ),  # was: domain_boxes['math'] must be a HyperBox, got dict
        (
            "[reliability]\nseed = 12345\n",
            "[reliability] seed is not a setting: each partition's and model's assessment",
        ),
        ("[reliability]\ndomain_seeds = { math = 1 }\n", "[reliability] domain_seeds is not a setting"),
        (
            "[reliability]\nprofile = { math = 1.0 }\n",
            "[reliability] profile is not a setting: the operational profile is",
        ),
        ("[reliability]\nhorizons = [true, 2]\n", "[reliability] horizons must be an array of numbers, got [True, 2]"),
        ('[reliability]\nquantiles = ["0.5"]\n', "[reliability] quantiles must be an array of numbers"),
        ("[glm.priors.binomial]\narrays = 1\n", "[glm.priors.binomial] arrays is not a prior: the fit sets it"),
        ("[glm.priors.binomial]\npaper_form = true\n", "[glm.priors.binomial] paper_form is not a prior"),
        ("[glm.priors.suite_binomial]\nunit_grid = false\n", "[glm.priors.suite_binomial] unit_grid is not a prior"),
        ('[ingest.scores]\nvalue_map = { C = "1" }\n', "[ingest.scores] value_map C must be a number, got '1'"),
        (
            "[ingest.scores]\nvalue_map = { C = 1, P = true }\n",
            "[ingest.scores] value_map P must be a number, got True",
        ),
        (
            "[ingest.scores]\nnumeric_range = [0, 1, 2]\n",
            "[ingest.scores] numeric_range must be an array of two numbers",
        ),
        (
            '[ingest.scores]\nnumeric_range = ["0", "1"]\n',
            "[ingest.scores] numeric_range must be an array of two numbers",
        ),
    ],
)
def test_a_bad_configuration_value_is_named_with_its_key(tmp_path, text, message):
    assert message in _refusal(tmp_path / "evalpipeline.toml", text)


@pytest.mark.parametrize(
    "text",
    [
        "[reliability]\nn_configurations = 16\n",
        "[reliability]\nn_configurations = 8\n[reliability.box]\na = [1, 1]\n",
        "[glm.thresholds]\nmax_r_hat = 1\nmin_ess_bulk = 0\nmin_ess_tail = 0\nmax_divergences = 0\nmin_bfmi = 0\n",
        "[ingest]\nchunk_rows = 1\n",
        '[glm.priors.binomial]\nuse_subdomain = false\nlikelihood = "beta_binomial"\n',
        "[ingest.scores]\nvalue_map = { C = 1, I = 0.0 }\nnumeric_range = [0, 10.5]\n",
        "[reliability]\nhorizons = [1.0, 2.0]\n",  # whole numbers written as floats, accepted before (a review)
    ],
)
def test_a_configuration_value_at_the_edge_of_its_range_is_accepted(tmp_path, text):
    assert _refusal(tmp_path / "evalpipeline.toml", text) == "(accepted)"


def test_cli_ingest_checks_the_whole_configuration_and_blames_flags_on_the_flags(tmp_path):
    """`evalpipeline ingest` refuses what `evalpipeline run` refuses (it ignored a misspelt table and
    printed a traceback for a bad [validate] value), and a bad flag is not blamed on the file."""
    log = next(p for p in sorted((REPO / "data" / "inspect_logs").iterdir()) if p.is_file())
    good = tmp_path / "good.toml"
    good.write_text("[glm]\nnum_samples = 200\n")
    cases = [
        ("[reliabilty]\nseed = 3\n", [], "bad.toml: unknown table(s) ['reliabilty']"),
        ('[validate]\nmax_error_share = "x"\n', [], "bad.toml: [validate] max_error_share must be a number"),
        ("[ingest.scores]\nnumeric_range = [1, 0]\n", [], "bad.toml: numeric_range must be finite with low < high"),
        (
            "[reliability]\nn_configurations = 4\n",
            [],
            "bad.toml: [reliability] n_configurations must be at least the 16",
        ),
        (None, ["--numeric-range", "1", "0"], "command-line options: numeric_range must be finite with low < high"),
        (None, ["--value-map", "C=2"], "command-line options: value_map['C'] = 2.0 is outside [0, 1]"),
    ]
    for text, flags, message in cases:
        config = good
        if text is not None:
            config = tmp_path / "bad.toml"
            config.write_text(text)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "evalpipeline.cli.main",
                "ingest",
                str(log),
                "--lake",
                str(tmp_path / "lake"),
                "--config",
                str(config),
                *flags,
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, (text, flags, done.stderr)
        assert done.stderr.startswith("evalpipeline ingest: ") and message in done.stderr, (message, done.stderr)
        assert not (tmp_path / "lake").exists()


def _refusal(path, text: str) -> str:
    """What check_config says about a configuration file holding ``text``, after the file's name."""
    from evalpipeline.settings import check_config

    path.write_text(text)
    try:
        check_config(path)
    except ConfigError as exc:
        assert str(exc).startswith(f"{path}: ")
        return str(exc)
    return "(accepted)"


def test_the_documented_configuration_passes_the_check(tmp_path, monkeypatch):
    """Every TOML block the README and docs/ show for evalpipeline.toml is accepted as written, copied into a
    folder that holds nothing else (a [reliability] block naming a taxonomy file the user does not have
    would pass only with a file planted beside it)."""
    from evalpipeline.settings import check_config

    readme = "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))])
    blocks = re.findall(r"```toml\n(.*?)```", readme, flags=re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVALPIPELINE_TAXONOMY", raising=False)
    for index, block in enumerate(blocks):
        path = tmp_path / f"block{index}.toml"
        path.write_text(block)
        check_config(path)


def test_the_documented_glm_settings_are_every_setting_with_its_default():
    """docs/configuration.md's [glm] block lists every sampler setting and gate with the code's default."""
    import dataclasses
    import tomllib

    from evalpipeline.models.fit import DiagnosticThresholds, FitSettings

    blocks = [
        tomllib.loads(b)
        for b in re.findall(r"```toml\n(.*?)```", (REPO / "docs" / "configuration.md").read_text(), flags=re.S)
    ]
    (glm,) = [b["glm"] for b in blocks if "num_warmup" in b.get("glm", {})]
    for cls, documented in ((FitSettings, glm), (DiagnosticThresholds, glm["thresholds"])):
        defaults = {
            f.name: list(f.default) if isinstance(f.default, tuple) else f.default for f in dataclasses.fields(cls)
        }
        assert set(defaults) - set(documented) == set(), cls.__name__
        assert {k: v for k, v in documented.items() if k in defaults} == defaults, cls.__name__


def test_cli_run_names_a_misspelt_configuration_table_before_any_work(tmp_path):
    config = tmp_path / "evalpipeline.toml"
    config.write_text("[glm.priors.binomial]\nsigma_subdomain_scal = 0.2\n")
    done = _cli_run(tmp_path, EVALPIPELINE_CONFIG=str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("evalpipeline run: ") and "sigma_subdomain_scal" in done.stderr
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize(
    "value, message",
    [
        ("abc", "must be a whole number, got 'abc'"),
        ("0", "must be at least 1, got 0"),
        ("100000", "must be at most the {cores} core(s) this process may use, got 100000"),
    ],
)
@pytest.mark.parametrize("command", ["run", "forget"])
def test_cli_run_names_a_bad_worker_count_in_words(command, value, message, capsys):
    import evalpipeline.cli.main as cli

    message = message.format(cores=cli.available_cores())
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--workers", value])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert f"argument --workers: {message}" in error and "_positive_int" not in error


def _first_log():
    return next(p for p in sorted((REPO / "data" / "inspect_logs").iterdir()) if p.is_file())


def _bad_paths(tmp_path) -> dict:
    """A folder where a configuration file belongs, a configuration file that is not UTF-8, and a
    regular file where the lake folder belongs."""
    (tmp_path / "config_folder").mkdir()
    (tmp_path / "latin1.toml").write_bytes(b"[glm]\nnum_chains = 4 # \xff\n")
    (tmp_path / "a_file").write_text("not a lake\n")
    return {"folder": tmp_path / "config_folder", "latin1": tmp_path / "latin1.toml", "file": tmp_path / "a_file"}


def _cli_ingest_refusal(tmp_path, monkeypatch, capsys, flags, environ) -> tuple[int, str, dict]:
    """Exit code and stderr of `evalpipeline ingest` of one demo log with ``flags`` and ``environ``
    ({name} in them: the paths of :func:`_bad_paths`), and those paths."""
    import evalpipeline.cli.main as cli

    paths = {name: str(path) for name, path in _bad_paths(tmp_path).items()}
    monkeypatch.delenv("EVALPIPELINE_CONFIG", raising=False)
    monkeypatch.setenv("EVALPIPELINE_LAKE", str(tmp_path / "lake"))
    for name, value in environ.items():
        monkeypatch.setenv(name, value.format(**paths))
    code = cli.main(["ingest", str(_first_log()), *(flag.format(**paths) for flag in flags)])
    assert not (tmp_path / "lake").exists() and (tmp_path / "a_file").read_text() == "not a lake\n"
    return code, capsys.readouterr().err, paths


def _cli_run_refusal(tmp_path, environ, message):
    paths = {name: str(path) for name, path in _bad_paths(tmp_path).items()}
    done = _cli_run(tmp_path, **{name: value.format(**paths) for name, value in environ.items()})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"evalpipeline run: {message.format(**paths)}") and done.stderr.count("\n") == 1
    assert not (tmp_path / "lake").exists()


def test_a_configuration_file_that_is_not_utf8_or_is_a_folder_is_named(tmp_path):
    from evalpipeline.settings import check_config

    paths = _bad_paths(tmp_path)
    # was the codec's message without the file, and an IsADirectoryError traceback
    for path, message in (
        (paths["latin1"], "not UTF-8 text (TOML must be): byte 0xff on line 2"),
        (paths["folder"], "is a folder, not a configuration file"),
    ):
        with pytest.raises(ConfigError) as error:
            check_config(path)
        assert str(error.value) == f"{path}: {message}"


@pytest.mark.parametrize(
    "flags, environ, message",
    [
        (["--config", "{folder}"], {}, "--config {folder}: is a folder, not a configuration file"),
        (
            [],
            {"EVALPIPELINE_CONFIG": "{folder}"},
            "EVALPIPELINE_CONFIG='{folder}': is a folder, not a configuration file",
        ),
        (["--config", "{latin1}"], {}, "--config {latin1}: not UTF-8 text (TOML must be): byte 0xff on line 2"),
    ],
)
def test_cli_ingest_names_a_configuration_file_it_cannot_read_with_its_option(
    tmp_path, monkeypatch, capsys, flags, environ, message
):
    """A folder was an IsADirectoryError traceback, a file not in UTF-8 the codec's message without the file."""
    code, error, paths = _cli_ingest_refusal(tmp_path, monkeypatch, capsys, flags, environ)
    assert code == 2 and error == f"evalpipeline ingest: {message.format(**paths)}\n"


@pytest.mark.parametrize(
    "environ, message",
    [
        ({"EVALPIPELINE_CONFIG": "{folder}"}, "EVALPIPELINE_CONFIG='{folder}': is a folder, not a configuration file"),
        ({"EVALPIPELINE_CONFIG": "{latin1}"}, "EVALPIPELINE_CONFIG='{latin1}': not UTF-8 text (TOML must be)"),
    ],
)
def test_cli_run_names_a_configuration_file_it_cannot_read_with_the_variable(tmp_path, environ, message):
    _cli_run_refusal(tmp_path, environ, message)


@pytest.mark.parametrize(
    "flags, environ, message",
    [
        (["--lake", "{file}"], {}, "--lake {file}: {file} exists and is not a folder"),
        (
            ["--lake", "{file}/lake"],
            {},
            "--lake {file}/lake: cannot create the lake folder {file}/lake: Not a directory",
        ),
        ([], {"EVALPIPELINE_LAKE": "{file}"}, "EVALPIPELINE_LAKE='{file}': {file} exists and is not a folder"),
    ],
)
def test_cli_ingest_names_a_lake_root_that_cannot_be_a_folder(tmp_path, monkeypatch, capsys, flags, environ, message):
    """Each was a NotADirectoryError traceback, after the configuration was read."""
    code, error, paths = _cli_ingest_refusal(tmp_path, monkeypatch, capsys, flags, environ)
    assert code == 2 and error == f"evalpipeline ingest: {message.format(**paths)}\n"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, where no folder can be created")
def test_cli_ingest_names_a_lake_folder_that_cannot_be_created(capsys):
    import evalpipeline.cli.main as cli

    code = cli.main(["ingest", str(_first_log()), "--lake", "/proc/no_such_lake"])  # was a FileNotFoundError traceback
    error = capsys.readouterr().err
    assert (
        code == 2
        and error.startswith(
            "evalpipeline ingest: --lake /proc/no_such_lake: cannot create the lake folder /proc/no_such_lake: "
        )
        and error.count("\n") == 1
    )


@pytest.mark.parametrize(
    "environ, message",
    [
        # each was a traceback: FileExistsError from Dagster, from a fit step (after its retries), IsADirectoryError
        ({"DAGSTER_HOME": "{file}"}, "DAGSTER_HOME='{file}': {file} is not a folder"),
        ({"DAGSTER_HOME": "{file}/home"}, "DAGSTER_HOME='{file}/home': {file} is not a folder"),
        ({"EVALPIPELINE_JAX_CACHE": "{file}"}, "EVALPIPELINE_JAX_CACHE='{file}': {file} is not a folder"),
        ({"EVALPIPELINE_TAXONOMY": "{folder}"}, "$EVALPIPELINE_TAXONOMY = '{folder}': {folder} is not a file"),
    ],
)
def test_cli_run_names_a_folder_or_file_setting_of_the_wrong_kind_before_any_work(tmp_path, environ, message):
    _cli_run_refusal(tmp_path, environ, message)


def test_cli_run_names_a_taxonomy_file_that_is_not_utf8(tmp_path):
    (tmp_path / "taxonomy.toml").write_bytes(b'[suites]\nx = "\xff"\n')
    done = _cli_run(tmp_path, EVALPIPELINE_TAXONOMY=str(tmp_path / "taxonomy.toml"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr == (
        f"evalpipeline run: $EVALPIPELINE_TAXONOMY = '{tmp_path / 'taxonomy.toml'}': not UTF-8 "
        "text (TOML must be): byte 0xff at offset 14\n"
    )


def test_cli_run_names_a_dagster_yaml_dagster_refuses(tmp_path):
    """Was Dagster's traceback (a YAML parser error, or its config error), exit 1."""
    home = tmp_path / "home"
    home.mkdir()
    for text, dagster_says in (
        ("run_retries:\n  enabled: maybe\n", "DagsterInvalidConfigError"),
        ("run_retries: [\n", "ParserError"),
    ):
        (home / "dagster.yaml").write_text(text)
        done = _cli_run(tmp_path, DAGSTER_HOME=str(home))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(
            f"evalpipeline run: DAGSTER_HOME='{home}': {home / 'dagster.yaml'}: {dagster_says}: "
        ), done.stderr


def test_a_misspelt_configuration_table_stops_the_code_location_loading(tmp_path):
    """The daemon and the UI load the code location, not `evalpipeline run`: a misspelt [reliabilty] was
    accepted there and every reliability step used the defaults."""
    (tmp_path / "evalpipeline.toml").write_text("[reliabilty]\nn_draws = 10\n")
    env = {**os.environ, "EVALPIPELINE_CONFIG": str(tmp_path / "evalpipeline.toml"), "DAGSTER_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", "import evalpipeline.definitions"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"evalpipeline.config.ConfigError: {tmp_path / 'evalpipeline.toml'}: unknown table(s) ['reliabilty']; "
        "known: ['ingest', 'validate', 'posterior', 'judge', 'glm', 'reliability', 'plots']"
    )


@pytest.mark.parametrize("cache", ["{tmp}/jax", ""])
def test_cli_run_names_a_lake_root_that_is_a_file_before_any_work(tmp_path, cache):
    """The run started and failed late, with a traceback per step. With the default compilation cache (under
    the lake) the lake is named, not the cache."""
    _cli_run_refusal(
        tmp_path,
        {"EVALPIPELINE_LAKE": "{file}", "EVALPIPELINE_JAX_CACHE": cache.format(tmp=tmp_path)},
        "EVALPIPELINE_LAKE='{file}': {file} exists and is not a folder",
    )


@pytest.mark.parametrize(
    "landing, message",
    [
        ("{tmp}", "the landing folder {tmp} holds the lake {tmp}/lake: the lake's tables would be read as logs"),
        ("{tmp}/lake/samples", "the landing folder {tmp}/lake/samples is inside the lake {tmp}/lake"),
    ],
)
def test_a_landing_folder_that_holds_or_lies_in_the_lake_is_refused(tmp_path, landing, message):
    """EVALPIPELINE_LANDING=data (the parent of data/inspect_logs and data/lake) read the demo lake's own
    tables as logs: 282 unreadable-file records and partitions named after its columns."""
    import evalpipeline.cli.main as cli
    from evalpipeline.lake import Lake
    from evalpipeline.steps.discovery import discover

    root = tmp_path.resolve()
    (root / "lake" / "samples").mkdir(parents=True)
    landing, message = landing.format(tmp=root), message.format(tmp=root)
    done = _cli_run(tmp_path, EVALPIPELINE_LANDING=landing, EVALPIPELINE_LAKE=str(root / "lake"))
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    with pytest.raises(ValueError, match="would be read as logs; set EVALPIPELINE_LANDING"):
        discover(Lake(root / "lake"), Path(landing))  # the landing sensor's and the nightly's ticks fail with it
    assert cli.main(["ingest", landing, "--lake", str(root / "lake"), "--no-validate"]) == 2
    assert not (root / "lake" / "ingested").exists()


def test_a_lake_or_landing_variable_of_spaces_means_its_default(monkeypatch):
    """README: an empty variable means its default. EVALPIPELINE_LAKE=' ' made a second lake in a folder named ' '."""
    from evalpipeline.config import DEFAULT_LAKE, DEFAULT_LANDING, lake_root, landing_root

    from evalpipeline.settings import config_path
    from resources.fit import DEFAULT_CACHE_MAX_MB, GlmSettings

    for variable in (
        "EVALPIPELINE_LAKE",
        "EVALPIPELINE_LANDING",
        "EVALPIPELINE_CONFIG",
        "EVALPIPELINE_JAX_CACHE_MAX_MB",
    ):
        monkeypatch.setenv(variable, "  ")
    monkeypatch.chdir(REPO / "tests")  # no evalpipeline.toml here
    assert (lake_root(), landing_root()) == (Path(DEFAULT_LAKE), Path(DEFAULT_LANDING))
    assert config_path() is None
    assert GlmSettings().cache_max_bytes() == int(DEFAULT_CACHE_MAX_MB) * 2**20


def test_judge_tables_are_read_and_bad_ones_refused_naming_the_scorer(tmp_path):
    from evalpipeline.settings import ConfigError, load_comparison_settings, load_judge_settings

    config = tmp_path / "evalpipeline.toml"
    config.write_text(
        "[judge.model_graded_qa]\ngood_passed = 72\nn_good = 80\nbad_failed = 51\nn_bad = 60\n"
        "[judge.known]\nsensitivity = 0.92\nspecificity = 0.85\n"
    )
    judges = {judge.scorer: judge for judge in load_judge_settings(config)}
    assert judges["model_graded_qa"].measured and judges["known"].sensitivity == 0.92
    assert {j.scorer for j in load_comparison_settings(config).judges} == {"model_graded_qa", "known"}
    bad = {
        "[judge.coin]\nsensitivity = 0.5\nspecificity = 0.55\n": "judge.coin.*too close to chance",
        "[judge.x]\ngood_passed = 72\nn_good = 80\n": "judge.x.*either the calibration counts",
        "[judge.x]\nsensitivity = 0.9\nspecificity = 0.9\nfalse_positive = 0.1\n": r"unknown keys in \[judge.x\]",
        '[judge.x]\nsensitivity = "0.9"\nspecificity = 0.9\n': r"\[judge.x\] sensitivity must be a finite number",
        "[judge.x]\ngood_passed = 90\nn_good = 80\nbad_failed = 51\nn_bad = 60\n": "judge.x.*0 <= count <= total",
        "[judge]\nx = 3\n": r"\[judge.x\] must be a table",
    }
    for text, message in bad.items():
        config.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_judge_settings(config)
