import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

# Hypothesis keeps its caches in a temp dir, not in the repository; no example database and no per-example
# deadline (timings are not part of any assertion).
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "harness-tests-hypothesis")
settings.register_profile("harness", database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("harness")
