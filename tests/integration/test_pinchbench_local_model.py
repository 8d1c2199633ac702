"""PinchBench with the real local model: `experiment=pinchbench` with `model=local` starts SmolLM2-135M itself,
runs real episodes in the sandbox with it as agent and as judge, and stops the server when the run ends. The model
is far too weak for the tasks: the point is that every part runs for real (scores are whatever they are)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hydra import compose, initialize_config_dir

from harness.config import register
from harness.records import read_transcript
from harness.run import CONFIG_DIR, run

register()
V2 = Path(__file__).resolve().parents[1] / "fixtures" / "pinchbench" / "v2"


def llama_servers() -> set[int]:
    """The llama.cpp servers this test process started (other runs' servers on the machine are not ours)."""
    out = subprocess.run(["pgrep", "-f", "harness.backends.llama_launcher"], capture_output=True, text=True)
    return {pid for pid in map(int, out.stdout.split()) if _parent(pid) == os.getpid()}


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_pinchbench_on_the_local_model_served_by_the_runner(llama_installed: None, tmp_path: Path) -> None:
    before = llama_servers()
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", ["experiment=pinchbench", f"benchmark.path={V2}", "policy=keep_last_n",
                                 "benchmark.ids=[task_sanity,task_sales_summary]", "max_steps=3", "judge=agent",
                                 f"judge.cache_dir={tmp_path / 'judge'}", f"out_dir={tmp_path / 'run'}",
                                 "progress=false", "preflight=false"])
    episodes = run(cfg, verbose=False).set_index("task_id")
    assert llama_servers() == before  # the runner stopped the server it started
    assert not episodes.simulated.any() and set(episodes.model) == {"SmolLM2-135M-Instruct.Q4_1"}
    # (timeout: the task's own time limit on a busy machine, graded as upstream grades it: the model now reads
    # its tool results, so its prompts are longer)
    assert set(episodes.termination) <= {"agent_final", "max_steps", "unusable_replies", "timeout"}, \
        episodes.error.tolist()
    assert (episodes.input_tokens > 0).all()  # real API usage
    # the hybrid task was sent to the real judge, the agent itself (judge=agent, labelled self-judged), whatever it
    # made of it: graded, a reply with no usable total, or an unparseable one
    assert episodes.loc["task_sales_summary", "judge_status"] in ("graded", "unusable", "error")
    assert episodes.loc["task_sales_summary", "judge_setting"] == "self-judged"
    assert episodes.loc["task_sales_summary", "judge_model"] == "SmolLM2-135M-Instruct.Q4_1"
    assert (tmp_path / "run" / "openclaw" / "task_sanity__run0.jsonl").exists()
    assert read_transcript(tmp_path / "run" / "transcripts" / "task_sanity__run0.jsonl")[0]["model"] == \
        "SmolLM2-135M-Instruct.Q4_1"
