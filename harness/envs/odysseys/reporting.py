"""What Odysseys' reports read (the one module harness.report may import from this benchmark; the import contract
in pyproject.toml checks it): the file names of the judged rows a run folder holds after `make judge`, and the
metrics computed from those rows (metrics.py, after upstream's analysis). Reports read records; they never call
the browser, the judge or the task loader."""

from harness.envs.odysseys.metrics import NEEDS, OdysseyMetrics, om2w_summary, summarize

JUDGED = "odysseys_judged.parquet"  # one row per task x run x rubric item (judge_run.py)
WEBJUDGED = "odysseys_webjudge.parquet"  # one WebJudge verdict per episode (judge_run.py)

__all__ = ["JUDGED", "NEEDS", "WEBJUDGED", "OdysseyMetrics", "om2w_summary", "summarize"]
