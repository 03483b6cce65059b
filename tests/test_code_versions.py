"""Code versions: an edit to one model's priors, the ingest or validation settings, the taxonomy
or the conjugate prior marks stale exactly the assets it changes, wherever the project lives."""

import pandas as pd
import pytest
from dagster import DagsterInstance, materialize

from assets.partitions import model_suite_key
from assets.posteriors import accuracy_posteriors
from assets.samples import eval_samples
from evalpipeline.lake.keys import to_partition_key
from tests.helpers.dagster import lake_resources


def test_changing_one_models_priors_changes_only_its_code_version(tmp_path, monkeypatch):
    from assets.fits import glm_version

    before = {glm: glm_version(glm) for glm in ("binomial", "beta_binomial", "null")}
    config = tmp_path / "evalpipeline.toml"
    config.write_text("[glm.priors.binomial]\nsigma_subdomain_scale = 0.2\n")
    monkeypatch.setenv("EVALPIPELINE_CONFIG", str(config))
    after = {glm: glm_version(glm) for glm in before}
    assert after["binomial"] != before["binomial"]
    assert after["beta_binomial"] == before["beta_binomial"] and after["null"] == before["null"]


def test_the_ingest_and_validation_configuration_is_in_the_sample_tables_code_version(tmp_path, monkeypatch):
    """Editing how scores are read or validated marks the sample tables stale (and only them);
    the chunk size, which does not change a row, does not."""
    from assets.fits import glm_version
    from assets.posteriors import posteriors_version
    from assets.samples import samples_version

    config = tmp_path / "evalpipeline.toml"
    config.write_text("")
    monkeypatch.setenv("EVALPIPELINE_CONFIG", str(config))
    others = (posteriors_version(), glm_version("binomial"))
    versions = {}
    for label, text in [
        ("default", ""),
        ("chunk", "[ingest]\nchunk_rows = 1000\n"),
        ("score map", "[ingest.scores]\nvalue_map = {C = 1.0, I = 0.0, P = 1.0}\n"),
        ("validation", "[validate]\nmax_error_share = 0.5\n"),
    ]:
        config.write_text(text)
        versions[label] = samples_version()
        assert (posteriors_version(), glm_version("binomial")) == others, label
    assert versions["chunk"] == versions["default"]
    assert len({versions["default"], versions["score map"], versions["validation"]}) == 3


def test_moving_a_suite_marks_the_partition_reliability_stale_and_a_profile_edit_only_the_models(tmp_path, monkeypatch):
    from assets.reliability import model_reliability, model_version, partition_version, reliability

    # the assets carry these versions (computed at import, under the session's configuration)
    assert set(model_reliability.code_versions_by_key.values()) == {model_version()}
    assert set(reliability.code_versions_by_key.values()) == {partition_version()}
    config, taxonomy = tmp_path / "evalpipeline.toml", tmp_path / "taxonomy.toml"
    config.write_text("")
    monkeypatch.setenv("EVALPIPELINE_CONFIG", str(config))
    taxonomy.write_text("# nothing mapped yet\n")
    before = (partition_version(), model_version())
    taxonomy.write_text("# a comment changes nothing\n\n")
    assert (partition_version(), model_version()) == before
    taxonomy.write_text('[suites]\narith = "arith"\n')  # a suite listed under its own name: no move
    assert partition_version() == before[0]
    taxonomy.write_text('[suites]\narith = "math"\n')
    mapped = (partition_version(), model_version())
    taxonomy.write_text('[suites]\narith = "math"\n[profile.domains]\nmath = 1.0\n')
    weighted = (partition_version(), model_version())
    # the partitions' tables name the suite's domain; the profile weighs only the model level
    assert mapped[0] != before[0] and weighted[0] == mapped[0]
    assert len({before[1], mapped[1], weighted[1]}) == 3


def test_reliability_versions_do_not_depend_on_where_the_project_lives(tmp_path, monkeypatch):
    """The same configuration and taxonomy in two folders give the same reliability versions: a lake
    or project copied elsewhere must not recompute every reliability table (the taxonomy's absolute
    path was part of them). Its contents still count."""
    from assets.reliability import _version, model_version, partition_version

    versions = []
    for folder in ("here", "elsewhere"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "evalpipeline.toml").write_text("[reliability]\nn_draws = 500\n")
        (tmp_path / folder / "taxonomy.toml").write_text('[suites]\narith = "math"\n')
        monkeypatch.setenv("EVALPIPELINE_CONFIG", str(tmp_path / folder / "evalpipeline.toml"))
        versions.append((_version(), partition_version(), model_version()))
    assert versions[0] == versions[1]
    (tmp_path / "elsewhere" / "taxonomy.toml").write_text('[suites]\narith = "numbers"\n')
    moved = (_version(), partition_version(), model_version())
    assert moved[0] == versions[0][0] and moved[1] != versions[0][1] and moved[2] != versions[0][2]


def test_the_conjugate_prior_comes_from_the_configuration_and_changes_only_its_code_version(
    landing, tmp_path, monkeypatch
):
    from assets.fits import glm_version
    from assets.compare import comparison_version
    from assets.posteriors import posteriors_version
    from assets.reliability import partition_version as reliability_version
    from evalpipeline.settings import ConfigError

    config = tmp_path / "evalpipeline.toml"  # (the taxonomy path is relative to the configuration's folder)
    config.write_text("")
    monkeypatch.setenv("EVALPIPELINE_CONFIG", str(config))
    before = (posteriors_version(), comparison_version(), glm_version("binomial"), reliability_version())
    config.write_text("[posterior]\nprior_a = 2\nprior_b = 2\n")
    after = (posteriors_version(), comparison_version(), glm_version("binomial"), reliability_version())
    # the suite comparisons and model profiles state the same conjugate posterior, so they go stale too
    assert after[0] != before[0] and after[1] != before[1] and after[2:] == before[2:]

    instance = DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model", [to_partition_key("mockllm/beta/v2")])
    instance.add_dynamic_partitions("suite", [to_partition_key("unit suite")])
    result = materialize(
        [eval_samples, accuracy_posteriors],
        partition_key=model_suite_key("mockllm/beta/v2", "unit suite"),
        instance=instance,
        resources=lake_resources(tmp_path / "lake", landing),
    )
    assert result.success
    table = pd.read_parquet(next((tmp_path / "lake" / "accuracy_posteriors").rglob("posteriors.parquet")))
    overall = table[table["level"] == "overall"].iloc[0]
    # 6 of 6 right under Beta(2, 2): posterior Beta(8, 2), mean 8 / 10 (Beta(1, 1) would give 7 / 8)
    assert (overall["prior_a"], overall["prior_b"], overall["k"], overall["n"]) == (2.0, 2.0, 6, 6)
    assert overall["posterior_mean"] == pytest.approx(0.8)
    from assets.compare import _comparison

    import logging

    _comparison(
        lake_resources(tmp_path / "lake", landing)["lake"], to_partition_key("unit suite"), logging.getLogger("test")
    )
    (board,) = (tmp_path / "lake" / "suite_comparison").rglob("leaderboard.parquet")
    row = pd.read_parquet(board).iloc[0]
    assert (row["prior_a"], row["prior_b"], row["posterior_mean"]) == (2.0, 2.0, pytest.approx(0.8))

    config.write_text("[posterior]\nprior_a = 0\n")
    with pytest.raises(ConfigError, match=r"evalpipeline.toml: \[posterior\] prior_a and prior_b must be positive"):
        posteriors_version()
    config.write_text("[posterior]\nhpdi = 0.9\n")
    with pytest.raises(ConfigError, match=r"unknown keys in \[posterior\]: \['hpdi'\]"):
        posteriors_version()
