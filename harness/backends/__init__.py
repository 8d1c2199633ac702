"""Model backends: the simulated offline agent (`sim`) now; OpenAI-compatible endpoints next."""

from harness.backends.base import ContextWindowExceeded, InfraError, LLMBackend

__all__ = ["ContextWindowExceeded", "InfraError", "LLMBackend"]
