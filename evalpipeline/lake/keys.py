"""Reversible mapping between display names and partition keys.

Model and suite names come from logs (``openai/gpt-4o``, ``cirrus 7b``) and
may hold characters that break file paths (``/``), Dagster multi-partition
keys (``|``, ``,``) or URLs. A partition key is the display name
percent-encoded (RFC 3986) with only ``A-Z a-z 0-9 _ . - ~`` left as they
are, plus a leading ``.`` encoded so that no key is ``.``, ``..`` or a hidden
directory. This is exactly the encoding pyarrow's Hive partitioning decodes
(``segment_encoding="uri"``), so ``pandas.read_parquet("data/lake/samples")``
shows the display names again without this code.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

#: Longest key accepted: one path segment must stay well under the usual
#: 255-byte file-name limit once ``model=`` is prefixed.
MAX_KEY_LENGTH = 200


def printable(text: str) -> str:
    """``text`` for a terminal line: control characters (line breaks, ANSI escapes) shown as escapes
    (``\\n``, ``\\x1b``) instead of acting. A name from a log could otherwise forge a line of a
    leaderboard or recolour the terminal."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in str(text))


class PartitionKeyError(ValueError):
    """A display name that cannot become a partition key."""


def to_partition_key(name: str) -> str:
    """Encode a display name as a path- and Dagster-safe partition key."""
    if not isinstance(name, str) or name == "":
        raise PartitionKeyError(f"partition name must be a non-empty string, got {name!r}")
    key = quote(name, safe="")
    if key.startswith("."):
        key = "%2E" + key[1:]
    if len(key) > MAX_KEY_LENGTH:
        raise PartitionKeyError(
            f"name {name[:60]!r}... encodes to a {len(key)}-character partition key; the limit is {MAX_KEY_LENGTH}"
        )
    return key


def from_partition_key(key: str) -> str:
    """Decode a partition key back to its display name (inverse of :func:`to_partition_key`)."""
    return unquote(key, errors="strict")
