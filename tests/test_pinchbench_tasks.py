"""PinchBench loading (order, identity, sections, sessions, flags, errors), the task table, and workspaces."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.envs.pinchbench.tasks import Session, as_dataset, load_benchmark, select, subset, task_table
from harness.envs.pinchbench.workspace import build_workspace
from harness.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "pinchbench"
V1, V2 = FIXTURES / "v1", FIXTURES / "v2"
UPSTREAM = Path("/work/.mirror/pinchbench+skill/repo")


def _copy(src: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(src, tmp_path / src.name))


def test_v2_follows_the_manifest_order_and_categories() -> None:
    """The fixture's manifest has PinchBench 2.0.0's shape (run_first, core, categories)."""
    bench = load_benchmark(V2)
    assert bench.version == 2 and bench.errors == ()
    # run_first, then the categories in file order; task_sanity (second in its category) comes first, once
    assert [t.id for t in bench.tasks] == [
        "task_sanity", "task_notes_answer", "task_sales_summary", "task_second_brain", "task_stock_price",
        "task_email_draft",
    ]
    assert bench.by_id("task_sales_summary").category == "csv_analysis"
    assert bench.by_id("task_sanity").category == "productivity"
    assert bench.categories == ("productivity", "csv_analysis", "memory", "research", "writing")
    assert bench.core == ("task_sanity", "task_email_draft", "task_sales_summary")


def test_the_manifest_category_wins_over_the_front_matter() -> None:
    """task_stock_price's front matter says `Research` (as upstream's task_polymarket_briefing does); upstream's
    TaskLoader gives it the manifest's `research`, so its Table 1 column is research's."""
    task = load_benchmark(V2).by_id("task_stock_price")
    assert task.frontmatter["category"] == "Research" and task.category == "research"


def test_core_subset_runs_in_the_core_lists_order() -> None:
    bench = load_benchmark(V2)
    assert [t.id for t in subset(bench, "core").tasks] == ["task_sanity", "task_email_draft", "task_sales_summary"]
    assert subset(bench, "all") == bench
    with pytest.raises(InputError, match="benchmark.subset='some' is not one of all, core"):
        subset(bench, "some")
    with pytest.raises(InputError, match="has no `core:` list"):
        subset(load_benchmark(V1), "core")


def test_the_flat_tasks_form_keeps_the_front_matter_categories(tmp_path: Path) -> None:
    root = _copy(V2, tmp_path)
    (root / "tasks" / "manifest.yaml").write_text(
        "tasks:\n  - task_stock_price\n  - task_sanity\n  - task_notes_answer\n  - task_sanity\n")
    for name in ("task_sales_summary", "task_second_brain", "task_email_draft"):
        (root / "tasks" / f"{name}.md").unlink()
    bench = load_benchmark(root)
    assert [(t.id, t.category) for t in bench.tasks] == [
        ("task_stock_price", "Research"), ("task_sanity", "productivity"), ("task_notes_answer", "productivity")]
    assert (bench.core, bench.categories) == ((), ())
    assert bench.errors == (f"{root / 'tasks' / 'manifest.yaml'}: tasks lists 'task_sanity' more than once",)


def _manifest(root: Path, text: str) -> Path:
    manifest = root / "tasks" / "manifest.yaml"
    manifest.write_text(text)
    return manifest


def test_a_task_file_in_no_category_is_a_load_error_and_not_loaded(tmp_path: Path) -> None:
    root = _copy(V2, tmp_path)
    manifest = root / "tasks" / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("  memory:\n    - task_second_brain\n", ""))
    bench = load_benchmark(root)
    assert "task_second_brain" not in [t.id for t in bench.tasks] and len(bench.tasks) == 5
    assert bench.errors == (f"{root / 'tasks' / 'task_second_brain.md'}: not listed in {manifest} "
                            "(upstream does not load it)",)


def test_a_task_in_two_categories_and_entries_in_no_category_are_errors(tmp_path: Path) -> None:
    root = _copy(V2, tmp_path)
    manifest = _manifest(root, "run_first: [task_sanity, task_stock_price]\ncore: [task_email_draft, task_ghost]\n"
                               "categories:\n  writing: [task_email_draft, task_notes_answer]\n"
                               "  productivity: [task_notes_answer, task_sales_summary, task_second_brain]\n"
                               "  research: [task_stock_price]\n")
    bench = load_benchmark(root)
    # run_first entries load first even outside every category (upstream's loader does; its lint fails)
    assert [(t.id, t.category) for t in bench.tasks] == [
        ("task_sanity", "productivity"), ("task_stock_price", "research"), ("task_email_draft", "writing"),
        ("task_notes_answer", "writing"), ("task_sales_summary", "productivity"),
        ("task_second_brain", "productivity")]
    assert bench.errors == (
        f"{manifest}: 'task_notes_answer' is in category 'productivity' and already in 'writing' (each task "
        "belongs to exactly one; the first is kept)",
        f"{manifest}: run_first names 'task_sanity', which is in no category",
        f"{manifest}: core names 'task_ghost', which is in no category")
    assert subset(bench, "core").tasks == (bench.by_id("task_email_draft"),)  # upstream skips an id not loaded


def test_v1_loads_task_files_in_name_order_with_front_matter_ids() -> None:
    bench = load_benchmark(V1)
    assert bench.version == 1 and bench.errors == ()
    # task_02_spreadsheet.md carries id task_07_spreadsheet; TASK_TEMPLATE.md is not a task file
    assert [t.id for t in bench.tasks] == ["task_00_sanity", "task_01_notes", "task_07_spreadsheet", "task_03_events"]
    assert bench.by_id("task_07_spreadsheet").file.name == "task_02_spreadsheet.md"
    assert bench.by_id("task_07_spreadsheet").weights == {"automated": 0.5, "llm_judge": 0.5}


def test_sections_criteria_and_grade_source_are_extracted_not_run() -> None:
    task = load_benchmark(V2).by_id("task_sales_summary")
    assert task.prompt.startswith("I have a CSV file `data/quarterly_sales.csv`")
    assert "Compute total revenue ($1,950.00)" in task.expected_behavior
    assert task.grading_criteria == (
        "File `sales_summary.md` created", "Total revenue correct ($1,950)", "Total profit correct ($750)",
        "Top region identified (North)")
    assert task.grade_source is not None and task.grade_source.startswith("def grade(transcript: list")
    assert task.grade_source.endswith("}")  # the fence is stripped
    assert task.llm_judge_rubric is not None and "### Criterion 2: Presentation (Weight: 40%)" in task.llm_judge_rubric
    assert task.additional_notes is not None and task.additional_notes.startswith("Modeled on")
    assert task.grading_type == "hybrid" and task.weights == {"automated": 0.7, "llm_judge": 0.3}
    assert task.timeout_seconds == 180
    namespace: dict[str, object] = {}
    exec(compile(task.grade_source, "grade", "exec"), namespace)  # noqa: S102 - our own fixture
    assert callable(namespace["grade"])
    email = load_benchmark(V2).by_id("task_email_draft")
    assert email.grade_source is None and email.automated_checks is None


def test_checked_criteria_count_too() -> None:
    assert load_benchmark(V1).by_id("task_07_spreadsheet").grading_criteria == (
        "data_summary.md created", "Total revenue correct")


def test_sessions_are_parsed_in_order_with_new_session() -> None:
    task = load_benchmark(V2).by_id("task_second_brain")
    assert [(s.id, s.new_session) for s in task.sessions] == [
        ("store_knowledge", False), ("conversation", False), ("new_session_recall", True)]
    assert task.turns == task.sessions and task.sessions[2].prompt.startswith("I previously saved")
    single = load_benchmark(V2).by_id("task_sanity")
    assert single.sessions == () and single.turns == (Session(single.prompt),)


def test_session_forms_strings_messages_and_bare_markers(tmp_path: Path) -> None:
    root = _copy(V1, tmp_path)
    file = root / "tasks" / "task_00_sanity.md"
    file.write_text(file.read_text().replace(
        "workspace_files: []", "workspace_files: []\nsessions:\n  - first\n  - message: second\n"
        "  - new_session: true\n  - prompt: third\n"))
    task = load_benchmark(root).by_id("task_00_sanity")
    assert task.sessions == (Session("first"), Session("second"), Session("third", new_session=True))


def test_flags_network_and_mock_by_rule_and_by_list(tmp_path: Path) -> None:
    bench = load_benchmark(V2)
    flagged = {t.id: t.offline_reason for t in bench.tasks if t.needs_network or t.needs_mock}
    assert flagged == {"task_stock_price": "live web (web search/fetch)"}
    assert [t.id for t in load_benchmark(V1).tasks if t.needs_network] == ["task_03_events"]
    root = _copy(V2, tmp_path)
    gh = root / "tasks" / "task_email_draft.md"
    gh.write_text(gh.read_text().replace("workspace_files: []", "workspace_files: []\nprerequisites:\n"
                                         "  - npm:@juppytt/fws\n  - cli:gh"))
    listed = load_benchmark(root, network_ids=["task_sanity"], offline_ids=["task_stock_price"])
    assert [(t.id, t.needs_network, t.needs_mock) for t in listed.tasks if t.needs_network or t.needs_mock] == [
        ("task_sanity", True, False), ("task_email_draft", False, True)]
    assert listed.by_id("task_email_draft").prerequisites == ("npm:@juppytt/fws", "cli:gh")


def test_a_broken_file_is_reported_with_its_path_and_the_rest_load(tmp_path: Path) -> None:
    root = _copy(V1, tmp_path)
    broken = root / "tasks" / "task_01_notes.md"
    broken.write_text("---\nid: task_01_notes\nname: [unclosed\n---\n\n## Prompt\n\nhi\n")
    no_front = root / "tasks" / "task_04_plain.md"
    no_front.write_text("## Prompt\n\nno front matter here\n")
    bench = load_benchmark(root)
    assert [t.id for t in bench.tasks] == ["task_00_sanity", "task_07_spreadsheet", "task_03_events"]
    assert len(bench.errors) == 2
    assert bench.errors[0].startswith(f"{broken}: invalid YAML front matter")
    assert bench.errors[1] == f"{no_front}: no YAML front matter (a `---` block at the top)"
    assert all("\n" not in e for e in bench.errors)


@pytest.mark.parametrize(("front", "reason"), [
    ("grading_type: vibes", "grading_type 'vibes' is not one of"),
    ("workspace_files:\n  - {dest: x.txt}", "workspace_files[0]: expected {source, dest} or {path, content}"),
    ("sessions:\n  - {new_session: true}", "sessions: a `new_session` marker is the last entry"),
    ("grading_weights: {automated: high}", "grading_weights.automated must be a number"),
])
def test_invalid_fields_are_reported(tmp_path: Path, front: str, reason: str) -> None:
    root = _copy(V1, tmp_path)
    file = root / "tasks" / "task_00_sanity.md"
    file.write_text(file.read_text().replace("grading_type: automated\n", "").replace(
        "workspace_files: []", front))
    bench = load_benchmark(root)
    assert len(bench.tasks) == 3 and len(bench.errors) == 1
    assert bench.errors[0].startswith(f"{file}: {reason}")


def test_manifest_naming_a_missing_file_is_an_error(tmp_path: Path) -> None:
    root = _copy(V2, tmp_path)
    manifest = root / "tasks" / "manifest.yaml"
    manifest.write_text(manifest.read_text() + "    - task_ghost\n")  # the last category's list
    bench = load_benchmark(root)
    assert len(bench.tasks) == 6
    assert bench.errors == (f"{manifest}: names 'task_ghost' but {root / 'tasks' / 'task_ghost.md'} does not exist",)


def test_duplicate_ids_are_an_error_and_the_first_is_kept(tmp_path: Path) -> None:
    root = _copy(V1, tmp_path)
    dup = root / "tasks" / "task_09_copy.md"
    dup.write_text((root / "tasks" / "task_01_notes.md").read_text())
    bench = load_benchmark(root)
    assert [t.id for t in bench.tasks].count("task_01_notes") == 1
    assert bench.by_id("task_01_notes").file.name == "task_01_notes.md"
    assert bench.errors == (f"{dup}: duplicate id 'task_01_notes' (already loaded from "
                            f"{root / 'tasks' / 'task_01_notes.md'})",)


def test_not_a_clone_and_a_bad_manifest_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no tasks/ directory"):
        load_benchmark(tmp_path)
    root = _copy(V2, tmp_path)
    for text, reason in (("tasks: {not: a list}\n", "expected `run_first:`, `core:` and `categories:`"),
                         ("categories: [a, b]\n", "`categories:` must map a category name"),
                         ("categories:\n  x: [../../etc/passwd]\n", "`categories.x:` must be a list of task ids"),
                         ("run_first: task_sanity\ncategories: {}\n", "`run_first:` must be a list of task ids")):
        _manifest(root, text)
        with pytest.raises(InputError, match=reason):
            load_benchmark(root)


def test_task_table_dataset_and_selection() -> None:
    bench = load_benchmark(V2)
    table = task_table(bench)
    assert list(table.columns) == ["id", "name", "category", "grading_type", "needs_network", "needs_mock",
                                   "n_sessions", "n_workspace_files"]
    row = table.set_index("id").loc["task_sales_summary"]
    assert (row["n_workspace_files"], row["n_sessions"], row["grading_type"]) == (2, 0, "hybrid")
    assert table.set_index("id").loc["task_second_brain", "n_sessions"] == 3
    assert [t.id for t in select(bench, categories=["productivity"]).tasks] == ["task_sanity", "task_notes_answer"]
    assert [t.id for t in select(bench, grading_types=["llm_judge"]).tasks] == ["task_email_draft"]
    assert [t.id for t in select(bench, ids=["task_email_draft", "task_sanity"]).tasks] == [
        "task_sanity", "task_email_draft"]
    assert "task_stock_price" not in [t.id for t in select(bench, offline_only=True).tasks]
    with pytest.raises(InputError, match="no tasks with ids task_nope"):
        select(bench, ids=["task_nope"])
    dataset = as_dataset(select(bench, grading_types=["hybrid"]))
    assert dataset["id"] == ["task_sales_summary", "task_second_brain"]
    assert dataset.filter(lambda r: r["category"] == "memory")["id"] == ["task_second_brain"]


def test_workspace_has_both_forms(tmp_path: Path) -> None:
    task = load_benchmark(V2).by_id("task_sales_summary")
    ws = build_workspace(task, V2, tmp_path / "ws")
    assert sorted(str(p.relative_to(ws)) for p in ws.rglob("*") if p.is_file()) == [
        "data/README.txt", "data/quarterly_sales.csv"]
    assert (ws / "data" / "quarterly_sales.csv").read_bytes() == (V2 / "assets/csvs/quarterly_sales.csv").read_bytes()
    assert (ws / "data" / "README.txt").read_text().startswith("quarterly_sales.csv: one row per")
    with pytest.raises(InputError, match="new or empty directory"):
        build_workspace(task, V2, ws)


def test_missing_asset_names_the_file(tmp_path: Path) -> None:
    root = _copy(V2, tmp_path)
    (root / "assets" / "csvs" / "quarterly_sales.csv").unlink()
    task = load_benchmark(root).by_id("task_sales_summary")
    with pytest.raises(InputError, match="workspace file source 'csvs/quarterly_sales.csv' not found"):
        build_workspace(task, root, tmp_path / "ws")


@pytest.mark.parametrize(("entry", "reason"), [
    ("- path: ../escaped.txt\n    content: x", "resolves outside"),
    ("- path: /tmp/pb_escape_abs.txt\n    content: x", "must be a relative path"),
    ("- path: sub/../../escaped.txt\n    content: x", "resolves outside"),
    ("- source: ../tasks/task_00_sanity.md\n    dest: stolen.md", "resolves outside"),
    ("- source: leak.txt\n    dest: leak.txt", "resolves outside"),
])
def test_workspace_escapes_are_refused(tmp_path: Path, entry: str, reason: str) -> None:
    root = _copy(V1, tmp_path)
    file = root / "tasks" / "task_00_sanity.md"
    file.write_text(file.read_text().replace("workspace_files: []", f"workspace_files:\n  {entry}"))
    task = load_benchmark(root).by_id("task_00_sanity")
    (tmp_path / "secret.txt").write_text("host secret")
    (root / "assets" / "leak.txt").symlink_to(tmp_path / "secret.txt")  # a symlink out of assets/
    with pytest.raises(InputError, match=reason):
        build_workspace(task, root, tmp_path / "ws")
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/pb_escape_abs.txt").exists()
    assert not any(p.is_file() for p in (tmp_path / "ws").rglob("*"))


def test_real_v1_repository_loads_23_tasks_without_errors(tmp_path: Path) -> None:
    if not (UPSTREAM / "HEAD").exists():
        pytest.skip(f"the upstream PinchBench mirror is not on this machine ({UPSTREAM})")
    # only tasks/: the mirror may lack the large asset blobs (GPT4.pdf), which `git archive HEAD` then fails on
    archive = subprocess.run(["git", "-C", str(UPSTREAM), "archive", "HEAD", "tasks"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    bench = load_benchmark(tmp_path)
    assert (bench.version, len(bench.tasks), bench.errors) == (1, 23, ())
    assert bench.by_id("task_16_market_research").file.name == "task_18_market_research.md"
    assert bench.by_id("task_18_spreadsheet_summary").weights == {"automated": 0.6, "llm_judge": 0.4}
    assert {t.id for t in bench.tasks if t.needs_network} == {
        "task_02_stock", "task_04_weather", "task_06_events", "task_13_image_gen", "task_14_humanizer",
        "task_16_market_research"}
    assert not any(t.needs_mock for t in bench.tasks)
    assert [s.new_session for s in bench.by_id("task_22_second_brain").sessions] == [False, False, True]
    assert all(t.grade_source for t in bench.tasks if t.grading_type != "llm_judge")


UPSTREAM_2 = Path("/work/.mirror/nucocloud+skill/repo")  # PinchBench 2.0.0 (commit 530dd6a)


def test_real_2_0_0_manifest_loads_147_tasks_in_upstreams_order(tmp_path: Path) -> None:
    if not (UPSTREAM_2 / "HEAD").exists():
        pytest.skip(f"the upstream PinchBench 2.0.0 mirror is not on this machine ({UPSTREAM_2})")
    archive = subprocess.run(["git", "-C", str(UPSTREAM_2), "archive", "HEAD", "tasks"], capture_output=True,
                             check=True)
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    bench = load_benchmark(tmp_path)
    assert (bench.version, len(bench.tasks), bench.errors) == (2, 147, ())
    assert [t.id for t in bench.tasks[:3]] == ["task_sanity", "task_calendar", "task_pdf_to_calendar"]
    assert bench.tasks[-1].id == "task_gws_task_management" and len(bench.categories) == 11
    assert bench.by_id("task_polymarket_briefing").category == "research"  # front matter: Research
    core = subset(bench, "core").tasks
    assert len(core) == 21 and core[0].id == "task_sanity" and core[-1].id == "task_gws_email_triage"
