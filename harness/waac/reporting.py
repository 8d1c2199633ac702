"""What the reports read about WAAC (the one module harness.report may import from harness.waac; the import
contract in pyproject.toml checks it): the sufficiency levels a step's decisions record and their join (eq. 5), so
the trajectory viewer shows the fused level of a field from the recorded decisions without running the policy."""

from harness.waac.lattice import Level, join

__all__ = ["Level", "join"]
