"""The Odysseys task file (harness.envs.odysseys.tasks) and `make check-bench BENCH=odysseys` (check.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from harness.envs.odysseys import check
from harness.envs.odysseys.tasks import (
    DEFAULT_PATH,
    LEVELS,
    V1,
    V2,
    VERSIONS,
    Rubric,
    load_tasks,
    load_version,
    select,
    task_table,
)
from harness.errors import InputError


def entry(task_id: str = "a" * 40, level: str = "easy", **kw: Any) -> dict[str, Any]:
    """One task entry as odysseys.json spells it."""
    return {"task_id": task_id, "confirmed_task": f"Do {task_id[:4]}.", "website": "https://www.google.com",
            "level": level, "reference_length": 4,
            "rubrics": {"R1": {"requirement": "Open A", "verification": "A is open"},
                        "R2": {"requirement": "Open B", "verification": ""},
                        "R3": {"requirement": "Report C", "verification": "C is stated"}}, **kw}


def write(path: Path, entries: Any) -> Path:
    path.write_text(json.dumps(entries))
    return path


# --- the shipped file --------------------------------------------------------------------------------------------

def test_shipped_file_loads_every_task_with_its_rubrics() -> None:
    tasks = load_tasks()
    table = task_table(tasks)
    assert (len(tasks.tasks), tasks.n_rubrics, tasks.errors) == (200, 1225, ())
    assert table.level.value_counts().to_dict() == {"hard": 109, "medium": 46, "easy": 45}
    assert (table.categories == "").sum() == 80  # categories absent on 80 tasks (optional)
    assert all(t.website.startswith("https://") for t in tasks.tasks)
    first = tasks.tasks[0]
    raw = json.loads(DEFAULT_PATH.read_text())[0]
    assert first.task_id == raw["task_id"] and first.instruction == raw["confirmed_task"]
    assert [r.key for r in first.rubrics] == list(raw["rubrics"])  # file order = the judge's order
    assert first.rubrics[0] == Rubric("R1", raw["rubrics"]["R1"]["requirement"], raw["rubrics"]["R1"]["verification"])


def test_check_prints_counts_by_level_and_the_last_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert check.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "200 tasks, 1225 rubric items: 0 load errors"
    by_level = {line.split()[0]: line.split()[1:3] for line in out if line.split()[:1] and line.split()[0] in LEVELS}
    assert by_level == {"easy": ["45", "213"], "medium": ["46", "267"], "hard": ["109", "745"]}


# --- malformed entries -------------------------------------------------------------------------------------------

BAD = [
    ({"level": "expert"}, "level 'expert' is not one of easy, medium, hard"),
    ({"rubrics": {}}, "rubrics is not a non-empty object"),
    ({"rubrics": {"R1": {"verification": "x"}}}, "rubrics.R1.requirement is not a non-empty string"),
    ({"reference_length": "4"}, "reference_length '4' is not a whole number >= 0"),
    ({"website": "www.google.com"}, "website 'www.google.com' is not an http(s) URL"),
    ({"task_id": "../x"}, "is not a safe folder name"),
    ({"categories": "Shopping"}, "categories is not a list of strings"),
    ({"categories": ["Shopping"], "num_categories": 2}, "num_categories 2 but 1 categories"),
]


@pytest.mark.parametrize(("change", "reason"), BAD)
def test_a_malformed_entry_is_one_error_line_and_the_rest_load(tmp_path: Path, change: dict[str, Any],
                                                                reason: str) -> None:
    path = write(tmp_path / "t.json", [entry("a" * 40), entry("b" * 40) | change, entry("c" * 40)])
    tasks = load_tasks(path)
    assert [t.task_id for t in tasks.tasks] == ["a" * 40, "c" * 40]
    assert len(tasks.errors) == 1 and tasks.errors[0].startswith(f"{path}: task 1: ") and reason in tasks.errors[0]
    assert "\n" not in tasks.errors[0]


def test_missing_field_duplicate_id_and_non_object_are_reported_by_index(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    no_task = {k: v for k, v in entry("d" * 40).items() if k != "confirmed_task"}
    path = write(tmp_path / "t.json", [entry("a" * 40), no_task, entry("a" * 40), 7])
    tasks = load_tasks(path)
    assert tasks.errors == (f"{path}: task 1: confirmed_task is missing",
                            f"{path}: task 2: duplicate task_id '{'a' * 40}' (already task 0)",
                            f"{path}: task 3: expected an object, got int")
    assert check.main([str(path)]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "1 tasks, 3 rubric items: 3 load errors"


def test_categories_are_optional(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json", [entry("a" * 40), entry("b" * 40, categories=["Travel", "Food"],
                                                              num_categories=2)])
    assert [t.categories for t in load_tasks(path).tasks] == [None, ("Travel", "Food")]


@pytest.mark.parametrize(("text", "reason"), [("{not json", "not a JSON file"), ('{"a": 1}', "expected a JSON array")])
def test_an_unreadable_file_is_one_input_error(tmp_path: Path, text: str, reason: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(InputError, match=reason):
        load_tasks(path)
    assert check.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and err.count("\n") == 1
    with pytest.raises(InputError, match="cannot read"):
        load_tasks(tmp_path / "missing.json")


# --- filters -----------------------------------------------------------------------------------------------------

def test_filter_by_level_and_id_keeps_file_order(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json", [entry("a" * 40, "hard"), entry("b" * 40, "easy"), entry("c" * 40, "hard")])
    assert [t.task_id[0] for t in load_tasks(path, levels=["hard"]).tasks] == ["a", "c"]
    assert [t.task_id[0] for t in load_tasks(path, ids=["c" * 40, "b" * 40]).tasks] == ["b", "c"]
    assert [t.task_id[0] for t in load_tasks(path, levels=["hard"], ids=["c" * 40, "b" * 40]).tasks] == ["c"]
    assert load_tasks(path).by_id("b" * 40).level == "easy"
    # one name alone (env.levels=easy on the command line) is a list of one, not its letters
    assert [t.task_id[0] for t in load_tasks(path, levels="hard", ids="c" * 40).tasks] == ["c"]


def test_unknown_level_or_id_is_one_line_input_error(tmp_path: Path) -> None:
    tasks = load_tasks(write(tmp_path / "t.json", [entry("a" * 40)]))
    with pytest.raises(InputError, match=r"^levels: unknown level\(s\) 'expert' \(known: easy, medium, hard\)$"):
        select(tasks, levels=["hard", "expert"])
    with pytest.raises(InputError, match=r"^ids: no task with id\(s\) nope in .*t\.json$"):
        select(tasks, ids=["nope"])
    with pytest.raises(InputError, match="no task with id 'nope'"):
        tasks.by_id("nope")


# --- versions (env.version) ---------------------------------------------------------------------------------------

def website_version(path: Path, n_tasks: int = 120, n_rubrics: int = 699) -> Path:
    """A file in the shape of the website's 120-task version (not public): the first real tasks (the first 120 of
    the 200 happen to hold 699 rubric items), with items dropped from the end or added to the first task until the
    total is `n_rubrics`."""
    entries = json.loads(DEFAULT_PATH.read_text())[:n_tasks]
    extra = sum(len(e["rubrics"]) for e in entries) - n_rubrics
    for e in reversed(entries):
        while extra > 0 and len(e["rubrics"]) > 1:
            e["rubrics"].pop(list(e["rubrics"])[-1])
            extra -= 1
    for i in range(-extra):
        entries[0]["rubrics"][f"X{i}"] = {"requirement": "An added item", "verification": ""}
    return write(path, entries)


def test_the_shipped_file_is_v1_200_pinned_by_its_bytes(tmp_path: Path) -> None:
    tasks = load_version()
    assert (tasks.version, len(tasks.tasks), tasks.n_rubrics) == (V1, 200, 1225)
    assert tasks.sha256 == hashlib.sha256(DEFAULT_PATH.read_bytes()).hexdigest() == VERSIONS[V1].sha256
    copy = tmp_path / "odysseys.json"
    copy.write_bytes(DEFAULT_PATH.read_bytes())
    assert load_version(None, copy).version == V1  # named by its bytes wherever it is
    assert load_version(V1, copy, levels=["easy"]).tasks[0].level == "easy"  # checked whole, then filtered


def test_v2_120_loads_a_user_file_checked_by_the_websites_counts(tmp_path: Path) -> None:
    path = website_version(tmp_path / "odysseys_120.json")
    tasks = load_version(V2, path)
    assert (tasks.version, len(tasks.tasks), tasks.n_rubrics) == (V2, 120, 699)
    assert tasks.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert load_version(V2, path, tasks.sha256).version == V2  # a sha256 the user pins is checked too
    with pytest.raises(InputError, match=r"^env.version=v2-120: no task file ships for it \(.*not in the public "
                                         r"repository.*\); give its file with env.tasks_path="):
        load_version(V2)


@pytest.mark.parametrize(("n_tasks", "n_rubrics"), [(121, 705), (120, 700)])
def test_a_wrong_count_is_one_line(tmp_path: Path, n_tasks: int, n_rubrics: int) -> None:
    path = website_version(tmp_path / "t.json", n_tasks, n_rubrics)
    with pytest.raises(InputError) as err:
        load_version(V2, path)
    assert str(err.value) == (f"{path}: {n_tasks} tasks and {n_rubrics} rubric items, but version v2-120 has 120 "
                              f"and 699 ({VERSIONS[V2].source})")


def test_a_wrong_sha256_is_one_line(tmp_path: Path) -> None:
    edited = tmp_path / "odysseys.json"
    edited.write_bytes(DEFAULT_PATH.read_bytes().replace(b"Hulu", b"hulu", 1))  # one letter of one rubric
    digest = hashlib.sha256(edited.read_bytes()).hexdigest()
    with pytest.raises(InputError) as err:
        load_version(V1, edited)
    assert str(err.value) == (f"{edited}: sha256 {digest} is not version v1-200's, {VERSIONS[V1].sha256}; give the "
                              "right file, or name this file's own version with env.version=<any name>")
    assert load_version(None, edited).version == "custom"  # unnamed: recorded as custom, with its sha256
    with pytest.raises(InputError, match=rf"^{edited}: sha256 {digest} is not env.tasks_sha256=abc; "):
        load_version("mine", edited, "abc")


def test_a_file_of_ones_own_is_recorded_by_name_and_sha256(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json", [entry("a" * 40)])
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (load_version(None, path).version, load_version(None, path).sha256) == ("custom", digest)
    assert load_version("pilot-1", path).version == "pilot-1"
    with pytest.raises(InputError, match=r"^env.version=pilot-1: no task file ships for it \(a version of your "
                                         r"own\); give its file with env.tasks_path=<odysseys json>$"):
        load_version("pilot-1")
