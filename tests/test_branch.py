"""Branches and attribution (harness.branch, issue #26 part 3): `make branch` replays steps 0..k-1 exactly (identical
step records but for wall-clock fields, no model call for a real backend, a simulated one checked on the same view)
and changes what follows; `restore=` puts dropped history messages back under the same policy; `make attribute`
branches every failed episode where its failure shows, with what the policy had dropped restored.

The run is real: C3 (keep the last 5 tool pairs) with model=sim_llmlike, 6 tasks x 1 run, through the real runner
in process (the shape `make attribute` is documented on).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from _support import CONFIG_DIR, ROOT
from hydra import compose, initialize_config_dir
from test_viewer import Viewer, chromium, shots  # noqa: F401  (the viewer's browser fixtures)

from harness import branch
from harness.config import register
from harness.records import read_transcript, steps_of
from harness.report import trajectory, view
from harness.run import run
from harness.types import Completion, Message, Usage

# wall-clock timing: the only fields a replay may change
WALL = {"policy_time_s", "model_time_s", "aux_time_s", "local_time_s"}
EPISODE = "hotel-001__run0"


@pytest.fixture(scope="module")
def c3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    register()
    out = tmp_path_factory.mktemp("branch") / "c3"
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["experiment=c3", "model=sim_llmlike", "n_tasks=6", "n_runs=1", f"out_dir={out}",
                                 "progress=false", "n_workers=1"])
    run(cfg, verbose=False)
    return out


def _steps(path: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in WALL} for r in steps_of(read_transcript(path))]


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("branches"))
    return copy


def _edit(path: Path, edit: Any) -> None:
    records = read_transcript(path)
    edit(records)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_branch_replays_the_steps_before_k_exactly_and_changes_what_follows(c3: Path) -> None:
    k = 9
    made = branch.branch(c3, EPISODE, k, branch.parse(["policy=full"]))
    assert made.folder == c3 / "branches" / f"{EPISODE}__s{k}__policy-full"
    original = _steps(c3 / "transcripts" / f"{EPISODE}.jsonl")
    mine = _steps(made.folder / "transcripts" / f"{EPISODE}.jsonl")
    assert mine[:k] == original[:k]
    assert mine[k]["n_view_messages"] > original[k]["n_view_messages"]  # full history from step k
    assert mine[k]["view"] == list(range(mine[k]["n_history_messages"]))
    start = read_transcript(made.folder / "transcripts" / f"{EPISODE}.jsonl")[0]
    origin = json.loads(start["branched_from"])
    assert origin == {"run": str(c3), "episode": EPISODE, "step": k, "label": "policy-full",
                      "change": {"overrides": ["policy=full"], "restore": []}, "replay_divergences": 0,
                      "view_divergences": 0, "original_completed": False}
    assert start["policy"] == "FullHistory" and start["method_key"] == "vanilla"
    episodes = pd.read_parquet(made.folder / "episodes.parquet")
    assert json.loads(episodes.branched_from[0])["step"] == k
    assert (made.folder / "steps.parquet").is_file() and (made.folder / "config.yaml").is_file()


def test_a_policy_field_changes_the_branch_and_an_added_key_needs_its_plus(c3: Path) -> None:
    k = 9
    made = branch.branch(c3, EPISODE, k, branch.parse(["policy.n=1"]))  # C3 keeps 5 pairs; this branch 1
    original, mine = (_steps(folder / "transcripts" / f"{EPISODE}.jsonl") for folder in (c3, made.folder))
    assert mine[:k] == original[:k] and mine[k]["n_view_messages"] < original[k]["n_view_messages"]
    with pytest.raises(branch.BranchError, match="has no 'extra'"):
        branch.changed_config(branch.run_config(c3), branch.parse(["policy.extra=1"]))
    added = branch.changed_config(branch.run_config(c3), branch.parse(["+policy.extra=1"]))
    assert added.policy.extra == 1 and branch.parse(["+policy.extra=1"]).policy_changed


def test_the_same_branch_made_again_says_it_replaced_the_first(c3: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(c3), EPISODE, "4", "policy=full", "label=twice"]
    assert branch.main(args) == 0 and "replaced" not in capsys.readouterr().out
    assert branch.main(args) == 0
    assert "Note: this replaced the branch of the same name there (give label=<name> to keep both)" in \
        capsys.readouterr().out


def test_restore_puts_the_dropped_messages_back_under_the_same_policy(c3: Path) -> None:
    rec = branch.load(c3, EPISODE)
    k, shows, rule = branch.failure_step(rec)
    assert (k, shows, rule) == (18, "confabulation(code:Room tax)", "names a dropped message")
    dropped = rec.dropped(k)
    assert dropped, "C3 has dropped tool pairs by then"
    made = branch.branch(c3, EPISODE, k, branch.parse([f"restore={','.join(map(str, dropped))}"]))
    mine = _steps(made.folder / "transcripts" / f"{EPISODE}.jsonl")
    original = _steps(c3 / "transcripts" / f"{EPISODE}.jsonl")
    assert mine[:k] == original[:k]
    step = mine[k]
    assert step["decisions"]["branch_restored"] == dropped
    assert set(dropped) <= {r for r in step["view"] if isinstance(r, int)}
    assert step["view"] == sorted(step["view"])  # put back in history order
    kinds = {p["sources"][0]: p["kind"] for p in step["view_provenance"] if p["sources"]}
    assert all(kinds[i] == "kept" for i in dropped)
    assert "confabulation" in json.dumps(original[k]["info"])
    assert "confabulation" not in json.dumps(step["info"])  # the code it lacked is back in view
    later = mine[k + 1]
    assert set(dropped) <= set(later["view"])  # still kept at the steps after k
    assert json.loads(read_transcript(made.folder / "transcripts" / f"{EPISODE}.jsonl")[0]["branched_from"])[
        "change"] == {"overrides": [], "restore": dropped}


def test_a_simulated_backend_that_replies_otherwise_is_one_clear_error(c3: Path, tmp_path: Path) -> None:
    copy = _copy(c3, tmp_path)
    path = copy / "transcripts" / f"{EPISODE}.jsonl"
    reply = branch.load(copy, EPISODE).boundary(3)

    def change_reply(records: list[dict[str, Any]]) -> None:
        message = next(r for r in records if r["type"] == "message" and r["index"] == reply)["message"]
        message["tool_calls"][0]["arguments"] = '{"changed": true}'

    _edit(path, change_reply)
    with pytest.raises(branch.BranchError, match=r"cannot replay to step 9: step 3: the simulated backend .*"
                                                 r"not deterministic"):
        branch.branch(copy, EPISODE, 9, branch.parse(["policy=full"]))


def test_a_view_the_policy_renders_otherwise_on_replay_is_named(c3: Path, tmp_path: Path) -> None:
    """A replayed step's view must be the recorded one (the policy's state at step k depends on it); a simulated
    backend's reply then differed too, reported as the backend's nondeterminism."""
    copy = _copy(c3, tmp_path)
    path = copy / "transcripts" / f"{EPISODE}.jsonl"

    def drop_one(records: list[dict[str, Any]]) -> None:
        step = next(r for r in records if r["type"] == "step" and r["step"] == 3)
        step["view"], step["view_provenance"] = step["view"][:-1], step["view_provenance"][:-1]

    _edit(path, drop_one)
    with pytest.raises(branch.BranchError, match=r"cannot replay to step 9: step 3: the policy's view differs from "
                                                 r"the recording at message \d+ .*: the policy is not deterministic"):
        branch.branch(copy, EPISODE, 9, branch.parse(["policy=full"]))


def test_a_real_backend_is_not_called_before_step_k(c3: Path) -> None:
    rec = branch.load(c3, EPISODE)

    class Endpoint:
        simulated, name, context_window = False, "endpoint", 128_000
        calls = 0

        def generate(self, messages: Any, tools: Any) -> Completion:
            Endpoint.calls += 1
            return Completion(Message("assistant", "live"), Usage(1, 1))

    replay = branch.Replay(rec, 3)
    backend = branch.ReplayBackend(Endpoint(), replay)
    first, second = backend.generate([], []), backend.generate([], [])
    assert Endpoint.calls == 0
    assert replay.view_divergences == [0, 1]  # an empty view is not what steps 0 and 1 showed: counted, not fatal
    shown = [rec.messages[v] if isinstance(v, int) else Message.from_dict(v) for v in rec.steps[2]["view"]]
    backend.generate(shown, [])  # the recorded view of step 2: no divergence
    assert replay.view_divergences == [0, 1]
    assert first.message == rec.reply(0) and second.message == rec.reply(1)
    assert first.usage.input_tokens == rec.steps[0]["input_tokens"]
    assert "prompt_cache" not in first.info  # the episode's own meter adds it again
    assert backend.generate([], []).message.content == "live" and Endpoint.calls == 1
    assert replay.view_divergences == [0, 1]  # from step k the view is the branch's own


def test_a_tool_result_that_differs_on_replay_is_counted_and_shown_as_recorded(c3: Path, tmp_path: Path) -> None:
    copy = _copy(c3, tmp_path)
    path = copy / "transcripts" / f"{EPISODE}.jsonl"
    result = branch.load(copy, EPISODE).boundary(2) + 1  # step 2's tool result

    def change_result(records: list[dict[str, Any]]) -> None:
        message = next(r for r in records if r["type"] == "message" and r["index"] == result)["message"]
        assert message["role"] == "tool"
        message["content"] = message["content"].replace("{", "{ ", 1)

    _edit(path, change_result)
    made = branch.branch(copy, EPISODE, 5, branch.parse(["policy=full"]))
    assert made.divergences == 1
    mine = read_transcript(made.folder / "transcripts" / f"{EPISODE}.jsonl")
    assert next(r for r in mine if r["type"] == "message" and r["index"] == result)["message"]["content"].startswith(
        "{ ")


def test_attribute_reports_the_failures_that_go_away_when_the_dropped_messages_come_back(c3: Path) -> None:
    table = branch.attribute(c3)
    episodes = pd.read_parquet(c3 / "episodes.parquet")
    failed = episodes[~episodes.completed.astype(bool)]
    assert len(table) == len(failed) >= 1
    row = table[table.episode == EPISODE].iloc[0]
    assert row["failure shows as"].startswith("confabulation(")  # where the simulated agent's events say
    assert row["dropped restored"] == len(branch.load(c3, EPISODE).dropped(int(row.step)))
    assert row["failure goes away"] in ("yes", "no")
    assert (c3 / row.branch / "transcripts" / f"{EPISODE}.jsonl").is_file()
    text = (c3 / "attribution.md").read_text()
    assert "went away with the dropped messages restored" in text
    assert "showing as confabulation at the branch step: " in text
    assert "attributed to confabulation by the failure model: " in text
    csv = (c3 / "attribution.csv").read_text()
    assert "failure model" in csv
    assert "(SIMULATED (model=sim_llmlike), not LLM results)" in text  # labelled as every table of a sim run
    assert f"each failed episode of c3 ({c3.parent.name}/{c3.name})" in text  # the method, not only a stamp
    assert csv.splitlines()[1].startswith("SIMULATED,")  # the CSV's first row under its header says it


def test_the_failure_step_prefers_an_event_naming_a_wrong_line() -> None:
    def step(events: list[str]) -> dict[str, Any]:
        return {"session": 0, "n_history_messages": 2, "view": [0, 1], "info": {"events": events}}

    end = {"score_details": json.dumps({"missing_lines": [{"subcategory": "Room tax", "date": "2026-01-02"}]})}
    rec = branch.Recorded(Path("x"), {}, [Message("system", "s"), Message("user", "u"), Message("assistant", "a")],
                          [step([]), step(["confabulation(code:Parking)"]), step(["confabulation(code:Room tax)"])],
                          end)
    assert branch.failure_step(rec) == (2, "confabulation(code:Room tax)", "names a wrong line")
    rec.end = {"score_details": "{}"}
    assert branch.failure_step(rec) == (1, "confabulation(code:Parking)", "first event")
    rec.messages[1] = Message("user", "the Parking charge")  # dropped from step 2's view (it shows 0 and 2 only)
    for s in rec.steps:
        s["view"] = [0]
    assert branch.failure_step(rec)[::2] == (1, "names a dropped message")


@pytest.mark.parametrize(("argv", "says"), [
    (["EP", "1", "policy=full"], "EPISODE='EP': expected <task_id>__run<r>"),
    (["nosuch__run0", "1", "policy=full"], "no such transcript"),
    ([EPISODE, "-1", "policy=full"], "STEP='-1' is not a step number"),  # (both printed the usage line alone)
    ([EPISODE, "abc", "policy=full"], "STEP='abc' is not a step number"),
    ([EPISODE, "\u00b2", "policy=full"], "STEP='\u00b2' is not a step number"),  # a digit to isdigit, not to int
    ([EPISODE, "999", "policy=full"], "STEP=999: hotel-001__run0 has steps 0..59"),
    ([EPISODE, "1"], "ARGS: nothing changes"),
    ([EPISODE, "1", "restore=a,b"], "restore='a,b': expected history indices"),
    ([EPISODE, "1", "restore=99999"], "ARGS: restore=99999: at step 1 the history holds messages 0.."),  # wrote a no-op
    ([EPISODE, "1", "policy=nosuch"], "ARGS: policy=nosuch: no configs/policy/nosuch.yaml"),
    # what the branch does not rebuild was written into its config.yaml and ignored by its episode (and a later
    # branch of it met `model: sim_llmlike` as a string: a traceback)
    ([EPISODE, "1", "max_steps=3"], "ARGS: max_steps=3: a branch changes only the policy"),
    ([EPISODE, "1", "model=sim_llmlike"], "ARGS: model=sim_llmlike: a branch changes only the policy"),
    ([EPISODE, "1", "polcy=full"], "ARGS: polcy=full: a branch changes only the policy"),
    ([EPISODE, "1", "policy.nn=3"], "ARGS: policy.nn=3: the run's policy has no 'nn' (its keys: _target_, n,"),
])
def test_bad_input_is_one_line(c3: Path, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert branch.main([str(c3), *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_branch_is_not_branched_again(c3: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A branch's config.yaml holds only its new policy: a branch of it re-rendered the steps before its branch
    step with that policy (FullHistory showing what C3 had cut) and went on as if it were a faithful replay."""
    made = branch.branch(c3, EPISODE, 4, branch.Change(["policy=full"], label="first"))
    assert branch.main([str(made.folder), EPISODE, "2", "policy=last_n"]) == 2
    err = capsys.readouterr().err
    assert f"RUN={made.folder} is a branch (of {c3.resolve()} at step 4): a branch cannot be branched again" in err
    assert not (made.folder / "branches").exists()


def test_a_hand_edited_transcript_of_the_wrong_shape_is_one_line(c3: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A message record without its message was a KeyError traceback."""
    copy = _copy(c3, tmp_path)
    _edit(copy / "transcripts" / f"{EPISODE}.jsonl",
          lambda records: next(r for r in records if r["type"] == "message").pop("message"))
    assert branch.main([str(copy), EPISODE, "3", "policy=full"]) == 2
    err = capsys.readouterr().err
    assert f"{EPISODE}.jsonl: malformed transcript (KeyError" in err and err.count("\n") == 1


def test_two_long_changes_get_two_branches() -> None:
    """The name was cut at 80 characters: two changes sharing those replaced each other's branch."""
    common = ["policy.summarizer.max_rows=3", "policy.summarizer.latency.overhead_s=0.5"]
    one, two = (branch.Change([*common, f"policy.w={w}"]) for w in (1, 2))
    assert one.name() != two.name() and len(one.name()) <= 80
    assert branch.Change(["policy=full"]).name() == "policy-full"


def test_a_branch_records_its_original_by_absolute_path(c3: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RUN given relative (`out/c3`) was recorded as typed: a viewer started elsewhere could not find the original."""
    monkeypatch.chdir(c3.parent)
    made = branch.branch(Path(c3.name), EPISODE, 3, branch.Change(["policy=full"], label="relative"))
    origin = json.loads(made.row["branched_from"])
    assert origin["run"] == str(c3.resolve())


def test_attribute_ignores_a_stray_file_as_every_report_does(c3: Path, tmp_path: Path) -> None:
    """`x__run0.orig.jsonl` beside the transcripts stopped it part-way with an error about an EPISODE never given."""
    copy = _copy(c3, tmp_path)
    shutil.copy(copy / "transcripts" / f"{EPISODE}.jsonl", copy / "transcripts" / f"{EPISODE}.orig.jsonl")
    table = branch.attribute(copy)
    assert EPISODE in set(table.episode) and f"{EPISODE}.orig" not in set(table.episode)
    assert (copy / "attribution.md").is_file()


@pytest.mark.parametrize("target", ["view", "branch", "attribute"])
def test_make_passes_a_run_path_with_a_space_whole(tmp_path: Path, target: str) -> None:
    """RUN="/tmp/my run" was split by the shell: `error: /tmp/my: not a directory`."""
    spaced = tmp_path / "my run"
    spaced.mkdir()
    proc = subprocess.run(["make", "-s", "-o", ".venv/.installed-stamp", target, f"PY={sys.executable}",
                           f"RUN={spaced}", "EPISODE=hotel-001__run0", "STEP=1", "ARGS=policy=full"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and str(spaced) in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-1000:]


def test_attribute_on_a_folder_that_is_not_a_run_is_one_line_and_creates_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert branch.main(["--attribute", str(tmp_path / "nonexistent")]) == 2
    err = capsys.readouterr().err
    assert "nonexistent: not a run folder (no transcripts/)" in err and err.count("\n") == 1
    assert branch.main([str(tmp_path), EPISODE, "1", "policy=full"]) == 2  # a folder holding runs, not a run
    assert f"RUN={tmp_path}: not a run folder (no transcripts/)" in capsys.readouterr().err
    assert not (tmp_path / "nonexistent").exists()


# ---- the viewer: each step's `make branch` command, and a branch beside its original --------------------------
def test_the_viewer_gives_each_step_the_branch_command_that_restores_its_dropped_messages(c3: Path) -> None:
    k = branch.failure_step(branch.load(c3, EPISODE))[0]
    branch.branch(c3, EPISODE, k, branch.Change(restore=branch.load(c3, EPISODE).dropped(k), label="restore-dropped"))
    data = trajectory.load_episode(c3, EPISODE)
    dropped = branch.load(c3, EPISODE).dropped(k)
    assert data["steps"][k]["branch_command"] == (f"make branch RUN={c3} EPISODE={EPISODE} STEP={k} "
                                                  f"ARGS='restore={','.join(map(str, dropped))}'")
    assert data["steps"][0]["branch_command"] is None  # nothing dropped yet
    folder = c3 / "branches" / f"{EPISODE}__s{k}__restore-dropped"
    assert folder in trajectory.find_runs(c3) and folder in trajectory.find_runs(c3.parent)
    run = trajectory.load_run(folder)
    assert run["branched_from"]["step"] == k and run["branched_from"]["run_resolved"] == str(c3.resolve())
    # a branch's own steps offer no command: `make branch` refuses to branch a branch
    assert all(s["branch_command"] is None for s in trajectory.load_episode(folder, EPISODE)["steps"])
    assert run["episodes"][0]["branched_from"]["episode"] == EPISODE


@pytest.mark.browser
def test_the_viewer_links_a_branch_and_its_original_side_by_side(c3: Path, chromium: Any,  # noqa: F811
                                                                 shots: Path) -> None:  # noqa: F811

    k = branch.failure_step(branch.load(c3, EPISODE))[0]
    made = branch.branch(c3, EPISODE, k, branch.Change(restore=branch.load(c3, EPISODE).dropped(k),
                                                       label="restore-dropped"))
    out, index = view.write_report([c3])
    ids = {Path(r["path"]).resolve(): r["id"] for r in index["runs"]}
    original, mine = ids[c3.resolve()], ids[made.folder.resolve()]
    v = Viewer(chromium, out, shots)
    v.go(f"#/run/{original}/ep/{EPISODE}/step/{k}", "episode")
    assert v.texts("#branch-command") == [trajectory.load_episode(c3, EPISODE)["steps"][k]["branch_command"]]
    assert any(f"Branch from step {k} (restore-dropped)" in t for t in v.texts("#branches li"))
    v.go(f"#/run/{mine}/ep/{EPISODE}", "episode")
    assert any(f"Branched from {EPISODE} at step {k}" in t for t in v.texts("#branches li"))
    v.click("#branches a:has-text('side by side')", "compare")
    assert [c.get_attribute("data-run") for c in v.page.locator(".compare-col").all()] == [original, mine]
    v.shot("branch-side-by-side")
    v.close()


def test_an_llm_user_is_told_its_recorded_replies_before_k_and_asked_after(c3: Path) -> None:
    rec = branch.load(c3, EPISODE)
    k = 5  # the user answered steps 0 and 1 (the folio's room charges, then the other charges)
    texts = [j for j in range(k) if rec.steps[j]["action"] == "message"]
    assert len(texts) == 2

    class LLMUser:
        backend = "an LLM"

        def __init__(self, task: Any) -> None:
            self.messages: list[Message] = []
            self.asked = 0

        def respond(self, agent_text: str) -> str:
            self.asked += 1
            return "live reply"

    factory = branch.replayed_user(LLMUser, branch.Replay(rec, k))
    assert factory is not None
    user = factory(None)  # type: ignore[arg-type]
    replies = [user.respond(rec.reply(j).content) for j in texts]
    assert replies == [rec.user_reply(j) for j in texts] and user.asked == 0  # type: ignore[attr-defined]
    assert [m.role for m in user.messages] == ["user", "assistant"] * 2  # type: ignore[attr-defined]
    assert user.respond("later") == "live reply" and user.asked == 1  # type: ignore[attr-defined]
