"""``python -m evalpipeline.validate [--check]``: (re)write or check ``canonical_suite.json``."""

from evalpipeline.validate.suite import main

raise SystemExit(main())
