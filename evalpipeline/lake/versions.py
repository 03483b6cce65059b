"""Code versions: a short hash of the code and settings that produce an asset.

Dagster compares an asset's code version with the one recorded at its last
materialisation; a change marks exactly the assets whose code or settings
changed (and what depends on them) as stale. Hashing the source files rather
than a hand-bumped number means nobody can forget to bump it.

What is hashed is each file's code, not its text (:func:`code_fingerprint`):
comments, docstrings and layout are left out, so that editing them marks nothing
stale. At 100 models x 6 suites a new GLM code version refits every GLM, ~9 min.
"""

from __future__ import annotations

import ast
import functools
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


def code_fingerprint(path: Path) -> bytes:
    """What of the Python file at ``path`` decides what it computes: its syntax tree without docstrings
    (``ast.dump``, which holds no line numbers or comments). A file that does not parse is taken
    as its bytes. The tree's dump is Python's own format, so a new Python version gives new code
    versions once."""
    stat = path.stat()
    return _fingerprint(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=1024)
def _fingerprint(path: Path, _mtime_ns: int, _size: int) -> bytes:  # keyed on the file's state: an edit is seen
    source = path.read_bytes()
    try:
        tree = ast.parse(source, filename=str(path))
    except (SyntaxError, ValueError):
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def code_version(modules: list[str], settings: dict | None = None, length: int = 12) -> str:
    """Hash of the code of ``modules`` (:func:`code_fingerprint`) and of ``settings`` (JSON, keys sorted)."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parents[2]  # the repository: names are as a reader sees them
    for path in module_files(*modules):
        resolved = path.resolve()
        name = resolved.relative_to(root) if resolved.is_relative_to(root) else resolved.name
        digest.update(str(name).encode() + b"\0" + code_fingerprint(resolved) + b"\0")
    digest.update(json.dumps(settings or {}, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:length]
