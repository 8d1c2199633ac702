"""Test infrastructure that runs real servers on loopback only.

- `fault_proxy`: a stdlib HTTP proxy that injects 429 / 500 / stalls / disconnects in front of any upstream, so
  retry, Retry-After and timeout handling can be tested deterministically.
- `fixture_sites`: local web sites for the Odysseys browser tests.
- `expense_trajectory`: real expense-environment exchanges appended to a history (WAAC tests and `make bench`).

Nothing here is imported by the harness itself (the import contract in pyproject.toml checks it). What a run uses
in production lives in harness.backends: the local model server (`local_server`, `llama_launcher`) and the
scripted backend (`scripted`). This package re-exports nothing.
"""
