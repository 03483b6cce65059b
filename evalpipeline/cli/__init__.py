"""The ``evalpipeline`` command line: ``main`` (the entry point), ``plan`` (planning an eval without a lake) and
``terminal`` (plain-text output)."""
