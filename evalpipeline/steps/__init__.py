"""The lake-level steps the assets call: plain functions that read and write the lake.

``samples`` (ingest, validation, headline posteriors), ``fits`` (GLM fits, stored and reused),
``rankings`` (WAIC/LOO), ``comparison`` (suite leaderboards, pairwise tables, model profiles),
``classification`` (per-class F1), ``figures`` (a partition's plots on request), ``accounting``
(where every row went), ``run_status`` (failed runs), ``discovery`` (what a refresh has to do).
"""
