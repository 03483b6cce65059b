"""Code versions: a short hash of the code and settings that produce an asset.

Dagster compares an asset's code version with the one recorded at its last
materialisation; a change marks exactly the assets whose code or settings
changed (and what depends on them) as stale. Hashing the source files rather
than a hand-bumped number means nobody can forget to bump it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path


def module_files(*names: str) -> list[Path]:
    """Source files of the named modules; a package contributes every ``.py`` file under it."""
    files: list[Path] = []
    for name in names:
        module = importlib.import_module(name)
        path = Path(module.__file__)
        if path.name == "__init__.py":
            files.extend(sorted(path.parent.rglob("*.py")))
        else:
            files.append(path)
    return files


def code_version(modules: list[str], settings: dict | None = None, length: int = 12) -> str:
    """Hash of the source of ``modules`` and of ``settings`` (JSON, keys sorted)."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for path in module_files(*modules):
        resolved = path.resolve()
        name = resolved.relative_to(root) if resolved.is_relative_to(root) else resolved.name
        digest.update(str(name).encode() + b"\0" + resolved.read_bytes() + b"\0")
    digest.update(json.dumps(settings or {}, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:length]
