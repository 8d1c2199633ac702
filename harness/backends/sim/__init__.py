"""The simulated tool-using model: decides from the visible context only. See `model.SimModel`."""

from harness.backends.sim.model import SimModel

__all__ = ["SimModel"]
