"""What the reports read about the SIMULATED agent's failure model (the one module harness.report may import from
harness.backends.sim; the import contract in pyproject.toml checks it): the mechanisms it can attribute a failure
to and the format of the events it records in a step's `info.events`. Reports read those records; they never run
the simulator."""

from harness.backends.sim.failures import EVENT, MECHANISMS

__all__ = ["EVENT", "MECHANISMS"]
