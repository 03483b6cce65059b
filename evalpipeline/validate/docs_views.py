"""GX's Data Docs views with one compiled-template cache per process.

GX builds a Data Docs site with fresh view objects, each with its own Jinja environment, so every
site build compiled the same ~50 templates again: at 100 models, ~0.35 s of each partition's
~1 s validation. These views are GX's own (``DefaultJinjaPageView`` for the validation and suite
pages, ``DefaultJinjaIndexPageView`` for the index) with a Jinja bytecode cache shared by all of
them, a documented Jinja mechanism: a template's compiled code is reused while its source's
checksum is unchanged, so the pages are rendered exactly as before. The cache lives in memory
(nothing is written, nothing pickled) and holds only GX's package templates. GX instantiates
these classes by name from the site configuration in :mod:`evalpipeline.validate.run`.
"""

from __future__ import annotations

from jinja2 import BytecodeCache
from jinja2.bccache import Bucket

from great_expectations.render.view import DefaultJinjaIndexPageView, DefaultJinjaPageView


class InMemoryBytecodeCache(BytecodeCache):
    """Compiled templates by Jinja's bucket key (template name and file); counts its hits."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}
        self.hits = 0

    def load_bytecode(self, bucket: Bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)  # Jinja discards it if the source's checksum changed
            self.hits += bucket.code is not None

    def dump_bytecode(self, bucket: Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()

    def clear(self) -> None:
        self._code.clear()

    def __len__(self) -> int:
        return len(self._code)


#: The process's cache, shared by every view of every site build.
TEMPLATE_CACHE = InMemoryBytecodeCache()


class CachedJinjaPageView(DefaultJinjaPageView):
    """GX's page view (validation results, expectation suites), compiling each template once a process."""

    def __init__(self, custom_styles_directory=None, custom_views_directory=None) -> None:
        super().__init__(custom_styles_directory, custom_views_directory)
        self.env.bytecode_cache = TEMPLATE_CACHE


class CachedJinjaIndexPageView(DefaultJinjaIndexPageView):
    """GX's index page view, compiling each template once a process."""

    def __init__(self, custom_styles_directory=None, custom_views_directory=None) -> None:
        super().__init__(custom_styles_directory, custom_views_directory)
        self.env.bytecode_cache = TEMPLATE_CACHE


def site_views() -> dict:
    """The ``site_index_builder`` / ``site_section_builders`` entries of a GX site that use these views
    (GX merges the section entries into its defaults)."""

    def view(name: str) -> dict:
        return {"module_name": __name__, "class_name": name}

    return {
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder", "view": view("CachedJinjaIndexPageView")},
        "site_section_builders": {
            section: {"view": view("CachedJinjaPageView")} for section in ("expectations", "validations", "profiling")
        },
    }
