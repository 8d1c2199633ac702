"""Odysseys behind the Domain/Episode contract: one episode per task, in a real browser (browser.py, tools.py).

An episode starts Chromium (pages live, recorded into `<archive>/<task_id>.har`, or replayed from it with the
network off: `browser.source`), opens the task's start page and shows it in the first user message, and lets the
agent act through the browser tools until it answers without a tool call (no user model, as upstream). A browser
that crashes or hangs ends the episode as an infrastructure failure (rerun on resume), never a task failure.
Every episode is also written in the layout upstream's judge reads (layout.py; screenshots per step), and is
judged at the end when a judge is available (`judge=...`, one call per rubric item); otherwise it is saved unjudged
for `make judge RUN=...` later.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.backends.base import InfraError
from harness.envs.base import EpisodeContext, UserModel
from harness.envs.odysseys.browser import Browser, BrowserConfig, BrowserCrashed, BrowserUnavailable
from harness.envs.odysseys.judge import Judge
from harness.envs.odysseys.layout import episode_dir, read_steps, write_episode
from harness.envs.odysseys.metrics import episode_columns, judge_columns, webjudge_columns
from harness.envs.odysseys.tasks import OdysseyTask, TaskSet, load_version
from harness.envs.odysseys.tools import BrowserResult, BrowserTools, cap_text, tool_specs
from harness.envs.odysseys.webjudge import WebJudge, WebJudgment, from_settings
from harness.errors import InputError
from harness.outcome import FAILED
from harness.types import ImagePart, Message, Score, Task, ToolCall, ToolSpec, Usage

ROOT = Path(__file__).resolve().parents[3]
SYSTEM_PROMPT = """You are a web agent operating a real browser to complete the user's task, which may span \
several websites. Each tool returns the current page as text: its URL and title, the open tabs, and the page's \
interactive elements numbered like [12] link "Cart" — use those numbers with click, type and select. Open new \
tabs when the task asks to keep pages open. Use only information you saw on the pages. When the task is done, \
reply without a tool call, giving the user everything the task asks for in one concise final answer."""
# browser.observation=screenshot|both: the sentence saying what each tool returns changes (the rest is the same)
_ARIA_SENTENCE = SYSTEM_PROMPT[SYSTEM_PROMPT.index("Each tool"):SYSTEM_PROMPT.index(" Open new")]
PROMPTS = {"aria": SYSTEM_PROMPT,
           "both": SYSTEM_PROMPT.replace("Each tool returns the current page as text:", "Each tool returns a "
                                         "screenshot of the browser's viewport and the current page as text:"),
           "screenshot": SYSTEM_PROMPT.replace(_ARIA_SENTENCE, (
               "Each tool returns a screenshot of the browser's viewport with the page's URL, title and open tabs; "
               "act with click_at(x, y) in the screenshot's pixel coordinates, type_text into the focused field "
               "and press_key."))}


class BrowserEnv:
    """The episode's tools over one Browser; a crash or hang is an infrastructure failure (InfraError)."""

    def __init__(self, tools: BrowserTools | None, failure: str | None = None, mode: str = "aria") -> None:
        self.browser_tools, self.failure, self.mode = tools, failure, mode
        self.records: dict[str, BrowserResult] = {}  # per tool-call id: url, screenshot, cap
        self.start_images: tuple[ImagePart, ...] = ()  # the start page's screenshot (screenshot|both modes)

    def tools(self) -> list[ToolSpec]:
        return tool_specs(self.mode)

    def execute(self, call: ToolCall) -> BrowserResult:
        if self.browser_tools is None or self.failure is not None:
            raise InfraError(f"browser unavailable: {self.failure}")
        try:
            result = self.browser_tools.execute(call)
        except BrowserCrashed as exc:
            self.failure = str(exc)
            self.close()
            raise InfraError(f"browser crashed or hung: {exc}") from None
        self.records[call.id] = result
        return result

    def close(self) -> None:
        if self.browser_tools is not None:
            self.browser_tools.browser.close()


@dataclass
class OdysseysEpisode:
    task: Task
    odyssey: OdysseyTask
    env: BrowserEnv
    start_page: str
    judge: Judge
    folder: Path | None
    user: UserModel | None = None
    provenance: dict[str, str] = field(default_factory=dict)  # version, task file sha256, observation mode
    webjudge: WebJudge | None = None  # Online-Mind2Web's judge (O-M2W Judge), over the same judge backend

    def opening(self) -> list[Message]:
        """The task and the start page; a browser or start page that failed is the episode's infra failure."""
        if self.env.failure is not None:
            raise InfraError(f"the browser could not open the start page: {self.env.failure}")
        return [Message("system", PROMPTS[self.env.mode]),
                Message("user", f"{self.odyssey.instruction}\n\nThe browser is open at {self.odyssey.website}. "
                                f"Current page:\n{self.start_page}", images=self.env.start_images)]

    def close(self) -> None:
        self.env.close()

    def score(self, history: Sequence[Message] = (), usage: Sequence[Usage] = (),
              termination: str | None = None) -> Score:
        """Close the browser, write the upstream layout, judge every rubric item when a judge is available. An
        episode that did not really run (infra failure, a harness crash: rerun on resume) is neither finished
        nor judged."""
        self.env.close()
        complete = self.env.failure is None and termination not in FAILED
        judgments, verdict = [], None
        if self.folder is not None:
            shots = {k: r.screenshot_file for k, r in self.env.records.items() if r.screenshot_file}
            urls = {k: r.url for k, r in self.env.records.items() if r.url}
            tabs = {k: r.tabs for k, r in self.env.records.items() if r.tabs}
            write_episode(self.folder, history, shots, urls, complete=complete, tabs=tabs)
            if complete:
                steps = read_steps(self.folder)
                judgments = self.judge.judge_episode(self.odyssey, steps, self.folder)
                verdict = self.webjudge.judge_episode(self.odyssey, steps, self.folder) if self.webjudge else None
        columns = {**episode_columns(judgments), **judge_columns(self.judge, judgments),
                   **webjudge_columns(verdict), "level": self.odyssey.level, "rubric_total": len(self.odyssey.rubrics),
                   "judged": bool(judgments) and all(j.status in ("success", "failure") for j in judgments),
                   "observation_truncations": sum(r.truncated for r in self.env.records.values()),
                   **self.provenance,
                   "archive_misses": sum(len(r.archive_misses) for r in self.env.records.values())}
        value = columns["rubric_score"] if judgments else math.nan
        # any_line_itemized / amount_itemized_pct: the expense paper's columns, as Odysseys has always written them
        # (some credit; no amount) so its episodes.parquet keeps its columns and values
        return Score(completed=columns["perfect"] == 1.0,
                     columns={"any_line_itemized": bool(value and value > 0), "amount_itemized_pct": math.nan,
                              **columns, "score": value},
                     details={"rubrics": [vars(j) | {"usage": vars(j.usage)} for j in judgments],
                              "calls": {k: r.record() for k, r in self.env.records.items()},
                              "browser_failure": self.env.failure,
                              "webjudge": verdict.record() if isinstance(verdict, WebJudgment) else None})


def _browser_config(raw: Any) -> tuple[BrowserConfig, str | None]:
    """The browser settings from config (Hydra passes a DictConfig): its BrowserConfig and the archive folder."""
    values = {str(k): v for k, v in dict(raw or {}).items()}
    archive = values.pop("archive", None)
    if "extra_args" in values:  # a list; a lone string stays one (tuple() would split it into letters)
        args = values["extra_args"]
        values["extra_args"] = (args,) if isinstance(args, str) else tuple(args or ())
    try:
        return BrowserConfig(**values), archive
    except TypeError as exc:
        raise InputError(f"browser: {exc} (known: archive, {', '.join(BrowserConfig.__dataclass_fields__)})") from None


def _check_n_tasks(n_tasks: object, available: int) -> int:
    """`n_tasks` (None: all) if 1..available: a 0 or too-large value would be an empty or silently shorter run."""
    if n_tasks is None:
        return available
    if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or not 1 <= n_tasks <= available:
        raise InputError(f"n_tasks={n_tasks} is out of range: {available} Odysseys tasks are selected after the "
                         f"filters (valid: 1..{available}, or n_tasks=null for all)")
    return n_tasks


@dataclass
class OdysseysDomain:
    """The shipped 200 tasks (`tasks_path`), filtered by `levels` and `ids`, the first `n_tasks` of them (the
    root n_tasks; None: all)."""

    tasks_path: str | None = None  # None: the version's shipped file (tasks.VERSIONS)
    version: str | None = None  # v1-200 (the paper's) | v2-120 (the website's) | your own name; None: by the file
    tasks_sha256: str | None = None  # the file must have these bytes (a known version's are pinned already)
    levels: list[str] | None = None
    ids: list[str] | None = None
    n_tasks: int | None = None
    browser: Any = None
    judge: Any = None  # the judge settings (root `judge`), carried here so the run's fingerprint covers them
    webjudge: Any = None  # WebJudge settings (env.webjudge: enabled, score_threshold): the O-M2W Judge column
    agent_multimodal: bool = False  # the agent takes images (model.multimodal): screenshot observations need it
    name: str = "odysseys"
    tasks: list[Task] = field(init=False)
    taskset: TaskSet = field(init=False)

    def __post_init__(self) -> None:
        self.config, self.archive = _browser_config(self.browser)
        if self.config.source in ("record", "replay") and not self.archive:
            raise InputError(f"browser.source={self.config.source} needs browser.archive=<a folder of HAR files>")
        if self.config.source == "replay" and not Path(str(self.archive)).is_dir():  # (every episode an infra_error)
            raise InputError(f"browser.archive={self.archive}: no such folder to replay from (browser.source=replay "
                             "reads <archive>/<task_id>.har, as browser.source=record wrote them)")
        if not Path(self.config.executable).exists():
            raise InputError(f"browser.executable: no Chromium at {self.config.executable}; run `make browser-deps` "
                             "(apt-get install -y chromium)")
        if self.config.observation != "aria" and not self.agent_multimodal:
            raise InputError(f"browser.observation={self.config.observation} needs a multimodal agent model "
                             "(model=openai model.multimodal=true); the scripted and simulated agents read text only")
        path = None if self.tasks_path is None else \
            Path(self.tasks_path) if Path(self.tasks_path).is_absolute() else ROOT / self.tasks_path
        self.taskset = load_version(self.version, path, self.tasks_sha256, levels=self.levels, ids=self.ids)
        if self.taskset.errors:  # never a silently shorter run
            raise InputError(f"{self.taskset.errors[0]} ({len(self.taskset.errors)} task(s) do not load; "
                             "make check-bench BENCH=odysseys lists them)")
        from_settings(Judge(None), self.webjudge)  # a bad env.webjudge setting: refused before any episode
        chosen = self.taskset.tasks[:_check_n_tasks(self.n_tasks, len(self.taskset.tasks))]
        self.tasks = [Task(t.task_id, t.instruction, {"level": t.level}) for t in chosen]

    def episode(self, task: Task, user_factory: Callable[[Task], UserModel] | None,
                context: EpisodeContext | None = None) -> OdysseysEpisode:
        odyssey = self.taskset.by_id(task.task_id)
        folder = None if context is None or context.out_dir is None else \
            episode_dir(context.out_dir, task.task_id, context.run)
        if folder is not None and folder.exists():
            shutil.rmtree(folder)  # a rerun starts a fresh record
        context = context or EpisodeContext()
        judge = Judge(context.judge, Path(context.judge_cache_dir) if context.judge_cache_dir else None,
                      context.judge_attempts, context.judge_max_images, unavailable_reason=context.judge_reason,
                      retry_unusable=context.judge_retry_unusable)
        webjudge = from_settings(judge, self.webjudge)
        env, page = self._open(odyssey, folder)  # last: nothing after it can fail and leave the browser running
        return OdysseysEpisode(task, odyssey, env, page, judge, folder, provenance=self.provenance(),
                               webjudge=webjudge)

    def provenance(self) -> dict[str, str]:
        """Episode columns saying which task file and which observation produced a result (Table 2 shows them)."""
        return {"odysseys_version": self.taskset.version, "odysseys_tasks_sha256": self.taskset.sha256,
                "observation_mode": self.config.observation}

    def _open(self, odyssey: OdysseyTask, folder: Path | None) -> tuple[BrowserEnv, str]:
        """Start the browser at the task's website; a browser that cannot start is the episode's infra failure."""
        archive = Path(self.archive) / f"{odyssey.task_id}.har" if self.archive else None
        try:
            browser = Browser(self.config, archive)
        except (BrowserCrashed, BrowserUnavailable) as exc:  # e.g. this task's archive is missing: its episode
            return BrowserEnv(None, str(exc), self.config.observation), ""
        tools = BrowserTools(browser, folder / "shots" if folder is not None else None)
        env = BrowserEnv(tools, mode=self.config.observation)
        try:
            first = env.execute(ToolCall("start", "goto", _json({"url": odyssey.website})))
        except InfraError as exc:
            env.failure = env.failure or str(exc)
            return env, ""
        env.records.pop("start", None)
        env.start_images = first.images
        if first.is_error or first.archive_misses:  # the agent could not even begin: not its failure
            env.failure = first.content.splitlines()[0] if first.content else "the start page did not load"
            env.close()
        return env, cap_text(first.content, self.config.observation_cap)[0]


def _json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value)
