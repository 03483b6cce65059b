"""A partition's and a suite GLM's figures drawn on request (evalpipeline/steps/figures.py,
``[plots] partitions`` and ``suite_fits``): the same pictures as drawn at fit time, none left from an
earlier fit, failed fits drawn anyway, and nothing drawn from a fit or an assessment of other data."""

import dataclasses

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from PIL import Image

from evalpipeline.steps.fits import FIT_PLOTS, GlmConfig, fit_partition_glm, fit_suite_glm
from evalpipeline.lake import Lake, write_parquet_atomic
from evalpipeline.models import SUITE_MODELS, DiagnosticThresholds, FitSettings
from evalpipeline.steps.figures import draw_partition_plots, draw_suite_fit_plots, suite_fits_not_applicable
from evalpipeline.steps.samples import NoDataError
from evalpipeline.reliability import ReliabilitySettings
from evalpipeline.steps.reliability import PLOT_FILES, ReliabilityConfig, assess_partition
from evalpipeline.settings import ConfigError, load_plot_settings
from tests.test_comparison import planted_scores, write_samples

CONFIG = GlmConfig(
    FitSettings(num_warmup=300, num_samples=300),
    DiagnosticThresholds(min_ess_bulk=100, min_ess_tail=100, max_r_hat=1.05),
    models=("binomial",),
)
SUITE_CONFIG = dataclasses.replace(CONFIG, models=("suite_binomial",))


def _reliability(tmp_path):
    return ReliabilityConfig(
        ReliabilitySettings(n_configurations=16, n_draws=200, grid_size=100, cdf_points=21),
        taxonomy_path=str(tmp_path / "no-taxonomy.toml"),
    )


def _lake(root, scores) -> Lake:
    lake = Lake(root)
    write_samples(lake, "m", "s", scores)
    return lake


def _pixels(path):
    with Image.open(path) as image:
        return image.mode, image.size, np.asarray(image).tobytes()


@pytest.fixture(scope="module")
def scores():
    rng = np.random.default_rng(5)
    return planted_scores(rng, rng.normal(0.0, 1.0, 30), 1.0)


@pytest.mark.slow
def test_figures_drawn_on_request_are_those_drawn_with_the_fit(tmp_path, scores):
    reliability = _reliability(tmp_path)
    with_fit = _lake(tmp_path / "with", scores)
    drawn_then = fit_partition_glm(with_fit, "m", "s", "binomial", CONFIG, version="v1", draw_plots=True)
    assessed_then = assess_partition(with_fit, "m", "s", reliability, code="c1", plots=True)
    assert drawn_then.passed and all((drawn_then.directory / f).exists() for f in FIT_PLOTS.values())

    on_request = _lake(tmp_path / "later", scores)
    fitted = fit_partition_glm(on_request, "m", "s", "binomial", CONFIG, version="v1", draw_plots=False)
    assessed = assess_partition(on_request, "m", "s", reliability, code="c1", plots=False)
    assert fitted.passed and not any((fitted.directory / f).exists() for f in FIT_PLOTS.values())
    assert not (assessed.directory / "plots").exists() or not any((assessed.directory / "plots").iterdir())
    # the numbers do not depend on the figures
    pd.testing.assert_frame_equal(fitted.summary, drawn_then.summary)
    pd.testing.assert_frame_equal(assessed.result.expected_reliability, assessed_then.result.expected_reliability)

    paths = draw_partition_plots(on_request, "m", "s", reliability, "c1")
    assert set(paths) == {f"binomial/{n}" for n in FIT_PLOTS} | {f"reliability/{n}" for n in PLOT_FILES}
    for name, file in FIT_PLOTS.items():
        assert paths[f"binomial/{name}"] == fitted.directory / file
        assert _pixels(fitted.directory / file) == _pixels(drawn_then.directory / file), name
    for name, file in PLOT_FILES.items():
        assert _pixels(assessed.directory / file) == _pixels(assessed_then.directory / file), name

    # the stored fit and assessment are reused as they are: drawing refitted nothing
    assert (
        fit_partition_glm(on_request, "m", "s", "binomial", CONFIG, version="v1", draw_plots=False).status == "reused"
    )
    assert assess_partition(on_request, "m", "s", reliability, code="c1", plots=False).status == "reused"
    assert all((fitted.directory / f).exists() for f in FIT_PLOTS.values())


@pytest.mark.slow
def test_a_refit_removes_the_figures_of_the_fit_it_replaces_and_a_failed_fit_draws_its_own(tmp_path, scores):
    reliability = _reliability(tmp_path)
    lake = _lake(tmp_path / "lake", scores)
    first = fit_partition_glm(lake, "m", "s", "binomial", CONFIG, version="v1", draw_plots=True)
    assess_partition(lake, "m", "s", reliability, code="c1", plots=True)
    # new data: the stored fit and assessment are of other data, so no figure may be drawn from them
    changed = scores.copy()
    changed[0, 0] = 1.0 - changed[0, 0]
    write_samples(lake, "m", "s", changed)
    with pytest.raises(NoDataError, match=r"glm_binomial .* earlier sample table: materialise glm_binomial"):
        draw_partition_plots(lake, "m", "s", reliability, "c1")
    refit = fit_partition_glm(lake, "m", "s", "binomial", CONFIG, version="v1", draw_plots=False)
    assert refit.status == "fitted" and not any((first.directory / f).exists() for f in FIT_PLOTS.values())
    with pytest.raises(NoDataError, match="materialise the partition's `reliability` first"):
        draw_partition_plots(lake, "m", "s", reliability, "c1")
    assessed = assess_partition(lake, "m", "s", reliability, code="c1", plots=False)
    assert assessed.status == "computed" and not any((assessed.directory / f).exists() for f in PLOT_FILES.values())
    assert len(draw_partition_plots(lake, "m", "s", reliability, "c1")) == len(FIT_PLOTS) + len(PLOT_FILES)

    # r-hat <= 0.5 cannot be met: the failed fit is the one somebody looks at, so it draws its figures
    strict = dataclasses.replace(CONFIG, thresholds=dataclasses.replace(CONFIG.thresholds, max_r_hat=0.5))
    failed = fit_partition_glm(lake, "m", "s", "binomial", strict, version="v1", draw_plots=False)
    assert failed.status == "fitted" and not failed.passed
    assert all((failed.directory / f).exists() for f in FIT_PLOTS.values())


@pytest.mark.slow
def test_always_draws_the_figures_a_stored_fit_lacks_without_refitting(tmp_path, scores):
    reliability = _reliability(tmp_path)
    lake = _lake(tmp_path / "lake", scores)
    fitted = fit_partition_glm(lake, "m", "s", "binomial", CONFIG, version="v1", draw_plots=False)
    assessed = assess_partition(lake, "m", "s", reliability, code="c1", plots=False)
    # the log moved: same rows, so the fit is reused, and "always" draws what it lacks
    samples_path = lake.table_path("samples", "samples.parquet", "m", "s")
    moved = pd.read_parquet(samples_path).assign(log_path="/elsewhere/a.eval")
    write_parquet_atomic(pa.Table.from_pandas(moved, preserve_index=False), samples_path)
    again = fit_partition_glm(lake, "m", "s", "binomial", CONFIG, version="v1", draw_plots=True)
    assert again.status == "reused" and all((fitted.directory / f).exists() for f in FIT_PLOTS.values())
    reused = assess_partition(lake, "m", "s", reliability, code="c1", plots=True)
    assert reused.status == "reused" and all((assessed.directory / f).exists() for f in PLOT_FILES.values())


def _suite_lake(root, scores) -> Lake:
    lake = _lake(root, scores)
    write_samples(lake, "other", "s", 1.0 - scores)
    return lake


@pytest.mark.slow
def test_a_suite_fits_figures_on_request_are_those_drawn_with_the_fit_and_never_of_other_data(tmp_path, scores):
    with_fit = _suite_lake(tmp_path / "with", scores)
    drawn_then = fit_suite_glm(with_fit, "s", "suite_binomial", SUITE_CONFIG, version="v1", draw_plots=True)
    assert drawn_then.passed and all((drawn_then.directory / f).exists() for f in FIT_PLOTS.values())

    lake = _suite_lake(tmp_path / "later", scores)
    with pytest.raises(
        NoDataError, match=r"no stored suite GLM fit of suite 's' .* materialise the suite_glm_\* assets"
    ):
        draw_suite_fit_plots(lake, "s")
    fitted = fit_suite_glm(lake, "s", "suite_binomial", SUITE_CONFIG, version="v1", draw_plots=False)
    assert fitted.passed and not any((fitted.directory / f).exists() for f in FIT_PLOTS.values())
    pd.testing.assert_frame_equal(fitted.summary, drawn_then.summary)
    paths = draw_suite_fit_plots(lake, "s")
    assert paths == {f"suite_binomial/{name}": fitted.directory / file for name, file in FIT_PLOTS.items()}
    for file in FIT_PLOTS.values():
        assert _pixels(fitted.directory / file) == _pixels(drawn_then.directory / file), file
    again = fit_suite_glm(lake, "s", "suite_binomial", SUITE_CONFIG, version="v1", draw_plots=False)
    assert again.status == "reused" and all((fitted.directory / f).exists() for f in FIT_PLOTS.values())

    # a model joins: the stored fit is of other data, so nothing may be drawn from it until it is refitted,
    # and the refit removes the figures of the fit it replaces
    write_samples(lake, "third", "s", scores[::-1].copy())
    with pytest.raises(NoDataError, match=r"suite_glm_binomial for suite 's' .* materialise suite_glm_binomial"):
        draw_suite_fit_plots(lake, "s")
    refit = fit_suite_glm(lake, "s", "suite_binomial", SUITE_CONFIG, version="v1", draw_plots=False)
    assert refit.status == "fitted" and not any((fitted.directory / f).exists() for f in FIT_PLOTS.values())
    assert len(draw_suite_fit_plots(lake, "s")) == len(FIT_PLOTS)
    # a suite without tables names what is missing
    with pytest.raises(NoDataError, match="no sample tables for suite 'absent'"):
        draw_suite_fit_plots(lake, "absent")


def test_a_suite_whose_glms_do_not_apply_has_no_figures_and_says_why_but_one_not_run_yet_fails(tmp_path, scores):
    # one model on the suite: the suite GLMs need several, and their records say so for these tables
    lake = _lake(tmp_path / "one", scores)
    with pytest.raises(NoDataError, match="materialise the suite_glm_"):
        draw_suite_fit_plots(lake, "s")  # nothing recorded yet: not run, not "not applicable"
    enabled = dataclasses.replace(CONFIG, models=SUITE_MODELS)
    for glm in SUITE_MODELS[:-1]:
        assert fit_suite_glm(lake, "s", glm, enabled, version="v1").status == "not applicable"
    with pytest.raises(NoDataError, match="materialise the suite_glm_"):
        draw_suite_fit_plots(lake, "s")  # one of them has not run
    assert fit_suite_glm(lake, "s", SUITE_MODELS[-1], enabled, version="v1").status == "not applicable"
    assert draw_suite_fit_plots(lake, "s") == {}
    reasons = suite_fits_not_applicable(lake, "s")
    assert set(reasons) == set(SUITE_MODELS) and all(reasons.values())
    # a second model joins: the records judged other tables, so the fits must run again first
    write_samples(lake, "other", "s", 1.0 - scores)
    assert suite_fits_not_applicable(lake, "s") == {}
    with pytest.raises(NoDataError, match="materialise the suite_glm_"):
        draw_suite_fit_plots(lake, "s")

    # every suite GLM left out of [glm] models: not applicable whatever the tables
    for glm in SUITE_MODELS:
        assert fit_suite_glm(lake, "s", glm, CONFIG, version="v1").status == "not applicable"
    assert draw_suite_fit_plots(lake, "s") == {}
    assert all(
        reason.startswith("disabled: not in [glm] models") for reason in suite_fits_not_applicable(lake, "s").values()
    )
    write_samples(lake, "third", "s", scores[::-1].copy())
    assert draw_suite_fit_plots(lake, "s") == {} and len(suite_fits_not_applicable(lake, "s")) == len(SUITE_MODELS)

    # the asset materialises (not fails) and says why there are no figures
    from dagster import DagsterInstance, materialize

    from assets.plots import suite_fit_plots
    from resources import LakeResource

    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("suite", ["s"])
        result = materialize(
            [suite_fit_plots],
            partition_key="s",
            instance=instance,
            resources={"lake": LakeResource(root=str(lake.root))},
        )
    assert result.success
    metadata = result.asset_materializations_for_node("suite_fit_plots")[0].metadata
    assert metadata["figures"].value == 0
    assert all(f"`{glm}`: disabled: not in [glm] models" in metadata["not_drawn"].value for glm in SUITE_MODELS)


def test_the_plot_setting_is_checked_and_on_request_by_default(tmp_path):
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert load_plot_settings(empty) == "on_request"
    assert load_plot_settings(empty, scope="suite_fits") == "on_request"
    config = tmp_path / "always.toml"
    config.write_text('[plots]\npartitions = "always"\n')
    assert load_plot_settings(config) == "always"
    assert load_plot_settings(config, scope="suite_fits") == "on_request"
    config.write_text('[plots]\nsuite_fits = "always"\n')
    assert (load_plot_settings(config), load_plot_settings(config, scope="suite_fits")) == ("on_request", "always")
    # a bad value of either key is refused whichever is asked for
    config.write_text('[plots]\nsuite_fits = "never"\n')
    with pytest.raises(ConfigError, match=r"\[plots\] suite_fits must be one of \['on_request', 'always'\]"):
        load_plot_settings(config)
    config.write_text('[plots]\npartitions = "sometimes"\n')
    with pytest.raises(
        ConfigError, match=r"always.toml: \[plots\] partitions must be one of \['on_request', 'always'\]"
    ):
        load_plot_settings(config)
    config.write_text('[plots]\npartition = "always"\n')
    with pytest.raises(
        ConfigError, match=r"unknown keys in \[plots\]: \['partition'\]; known: \['partitions', 'suite_fits'\]"
    ):
        load_plot_settings(config)
