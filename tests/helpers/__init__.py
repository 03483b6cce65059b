"""Helpers shared by the test files: log writers (Inspect logs made offline, deliberately broken
logs, large synthetic logs), worker-pool steps, and the Dagster tests' projects and resources."""
