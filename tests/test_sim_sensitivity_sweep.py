"""`make sweep SWEEP=sim_sensitivity` (issue #15): one multirun per failure-model parameter, its values read from
configs/model/sim_llmlike.yaml's `sweep:` lists, C2 / C3 / C4 per value, the other mechanisms at their defaults."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from _support import ROOT
from hydra.core.override_parser.overrides_parser import OverridesParser

from harness import sweep
from harness.errors import InputError

MODEL = yaml.safe_load(sweep.SIM_MODEL.read_text())["failures"]
LISTED = [(block, key, values) for block, body in MODEL.items() for key, values in body.get("sweep", {}).items()]


def test_every_sweep_list_in_the_model_yaml_is_an_axis_with_its_values() -> None:
    assert [tuple(a) for a in sweep.axes()] == LISTED
    assert [a.key for a in sweep.axes()] == ["length_curve", "position_curve", "p_absent", "verify_share"]


def test_a_block_that_gains_a_sweep_list_is_swept_and_a_bad_list_is_one_clear_error(tmp_path: Path) -> None:
    raw = yaml.safe_load(sweep.SIM_MODEL.read_text())
    raw["failures"]["stale_confusion"]["sweep"] = {"enabled": [True, False]}
    (path := tmp_path / "m.yaml").write_text(yaml.safe_dump(raw))
    assert sweep.axes(path)[-1] == ("stale_confusion", "enabled", [True, False])
    raw["failures"]["stale_confusion"]["sweep"] = {"enabeld": [True]}
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError, match=r"failures\.stale_confusion\.sweep\.enabeld names no parameter"):
        sweep.axes(path)


@pytest.mark.parametrize("value", ["gpt4_1106", "null", "0.5", "it's", "a,b c", 0.006, 1e-05, 3, True])
def test_values_reach_hydra_as_written(value: Any) -> None:
    parsed = OverridesParser.create().parse_override(f"k={sweep.hydra_value(value)},{sweep.hydra_value(value)}")
    got = next(parsed.sweep_iterator())
    assert getattr(got, "text", got) == value and type(getattr(got, "text", got)) is type(value)


def test_make_sweep_installs_no_methods_extra_for_it(tmp_path: Path) -> None:
    """It runs C2 / C3 / C4 only: `make -n` for a venv not yet made plans the default install and no extra."""
    steps = subprocess.run(["make", "-n", "sweep", "SWEEP=sim_sensitivity", f"VENV={tmp_path / 'v'}"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert "-e '.[dev]'" in steps and "-e '.[methods]'" not in steps and "harness.sweep sim_sensitivity" in steps


def test_another_model_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        sweep.main(["sim_sensitivity", "model=openai", "n_tasks=1", f"hydra.sweep.dir={tmp_path}"])
    assert stop.value.code == 2  # bad input, as every command says it
    assert re.fullmatch(r"error: SWEEP=sim_sensitivity sweeps the failure model of model=sim_llmlike .*ARGS name "
                        r"model=openai\n", capsys.readouterr().err)


def test_args_pass_through_and_an_axis_named_in_args_takes_its_values_there_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, Path, list[str]]] = []
    monkeypatch.setattr(sweep, "multirun", lambda *call: calls.append(call))
    p_absent = "model.failures.confabulation.p_absent=0.379,0.937"
    sweep.main(["sim_sensitivity", "n_runs=1", p_absent, "max_steps=30", f"hydra.sweep.dir={tmp_path}"])
    assert [(c[0], c[1]) for c in calls] == [("sim_sensitivity", tmp_path / key) for _, key, _ in LISTED]
    assert calls[0][2][0] == "model.failures.position_length.length_curve=" + ",".join(LISTED[0][2])
    assert calls[2][2] == [p_absent, "n_runs=1", "max_steps=30", f"hydra.sweep.dir={tmp_path}"]
    assert all(not any(o.startswith("model.failures.confabulation") for o in c[2]) for i, c in enumerate(calls)
               if i != 2)


def test_a_stopped_axis_says_how_to_resume_the_whole_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    def stopped(*_: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "multirun", stopped)
    with pytest.raises(SystemExit) as stop:  # as every sweep stopped by a signal: 130, with the resume line
        sweep.main(["sim_sensitivity", "n_runs=1", f"hydra.sweep.dir={tmp_path}"])
    err = capsys.readouterr().err
    assert stop.value.code == 130 and "Stopped (SIGINT received)" in err
    assert f"make sweep SWEEP=sim_sensitivity ARGS='n_runs=1 hydra.sweep.dir={tmp_path}'" in err


@pytest.mark.slow  # a real Hydra multirun over every axis (~20 s)
def test_tiny_sweep_writes_one_multirun_per_axis_with_the_swept_value_and_defaults_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Each axis cut to two values (a copy of the model YAML), n_tasks=1 n_runs=1: 4 axes x 2 values x C2-C4."""
    raw = yaml.safe_load(sweep.SIM_MODEL.read_text())
    for body in raw["failures"].values():
        body["sweep"] = {k: v[:2] for k, v in body.get("sweep", {}).items()}
    monkeypatch.setattr(sweep, "SIM_MODEL", tmp_path / "cut.yaml")
    sweep.SIM_MODEL.write_text(yaml.safe_dump(raw))
    out = tmp_path / "sweeps" / "sim_sensitivity" / "x"
    # one job at a time: joblib then runs them in this multirun's process, no worker to start (the test's time)
    sweep.main(["sim_sensitivity", "n_tasks=1", "n_runs=1", "hydra.launcher.n_jobs=1", f"hydra.sweep.dir={out}"])
    assert f"sweep folder: {out}" in capsys.readouterr().out
    for block, key, values in LISTED:
        assert (out / key / "merged.parquet").exists(), key
        merged = pd.read_parquet(out / key / "merged.parquet")
        assert sorted(merged.experiment) == sorted(["c2", "c3", "c4"] * 2) and set(merged.model) == {"sim_llmlike"}
        assert all(f"model.failures.{block}.{key}=" in o and "n_tasks=1" in o for o in merged.job_overrides)
        jobs = sorted(p for p in (out / key).iterdir() if p.name.isdigit())
        swept = [_swept(yaml.safe_load((j / "config.yaml").read_text())["model"]["failures"], block, key)
                 for j in jobs]
        assert sorted(swept, key=str) == sorted(values[:2] * 3, key=str)


def _swept(failures: dict[str, Any], block: str, key: str) -> Any:
    """A job's value of the swept parameter, after checking every other parameter of every block is its default."""
    for name, body in MODEL.items():
        for param, default in body.items():
            if (name, param) != (block, key):
                assert failures[name][param] == default, (block, key, name, param)
    return failures[block][key]
