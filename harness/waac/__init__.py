"""WAAC: workflow-aware, field-level trajectory compression (the WAAC paper, §3 and Appendix A)."""

from harness.waac.lattice import Level, join, join_all, leq
from harness.waac.policy import WAAC

__all__ = ["WAAC", "Level", "join", "join_all", "leq"]
