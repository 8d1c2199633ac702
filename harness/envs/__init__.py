"""Benchmark domains: `base` is what the orchestrator needs from one; each sub-package is one benchmark, and
what its reports need it exposes through its `reporting` module (the import contract in pyproject.toml)."""
