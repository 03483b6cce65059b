import random

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalpipeline.lake.keys import MAX_KEY_LENGTH, PartitionKeyError, from_partition_key, to_partition_key

TRICKY = [
    "openai/gpt-4o",
    "mockllm/cirrus 7b",
    "a|b,c[d]",
    "..",
    ".",
    ".hidden",
    "100%",
    "%2F",
    "naïve—模型",
    "tab\there",
    "x" * 60,
    "model=foo",
    "emoji 🚀",
]


@pytest.mark.parametrize("name", TRICKY)
def test_round_trip_and_safe_characters(name):
    key = to_partition_key(name)
    assert from_partition_key(key) == name
    assert set(key) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~%")
    assert key not in (".", "..") and not key.startswith(".")
    assert "/" not in key and "|" not in key and "," not in key


def test_random_unicode_round_trip():
    rng = random.Random(7)
    alphabet = [chr(c) for c in range(32, 0x2FF)] + ["/", "%", " ", "\u4e2d", "\U0001f600"]
    for _ in range(500):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        assert from_partition_key(to_partition_key(name)) == name


def test_distinct_names_get_distinct_keys():
    keys = {to_partition_key(n) for n in TRICKY}
    assert len(keys) == len(TRICKY)


def test_bad_names_are_refused_clearly():
    with pytest.raises(PartitionKeyError, match="non-empty"):
        to_partition_key("")
    with pytest.raises(PartitionKeyError, match="limit is"):
        to_partition_key("/" * MAX_KEY_LENGTH)


def test_pyarrow_hive_reading_decodes_keys_to_display_names(tmp_path):
    for name in ["openai/gpt-4o", "mockllm/cirrus 7b", "100%"]:
        folder = tmp_path / f"model={to_partition_key(name)}"
        folder.mkdir()
        pq.write_table(pa.table({"x": [1]}), folder / "part.parquet")
    frame = pd.read_parquet(tmp_path)
    assert sorted(frame["model"].astype(str)) == sorted(["openai/gpt-4o", "mockllm/cirrus 7b", "100%"])
