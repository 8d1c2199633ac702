"""What the reports read about the context methods beyond harness.methods (the one module harness.report may import
from harness.policies; the import contract in pyproject.toml checks it): why a method cannot run here, shown in
its table row instead of a result."""

from harness.policies.tokenskip import UNSUPPORTED as TOKENSKIP_UNSUPPORTED

__all__ = ["TOKENSKIP_UNSUPPORTED"]
