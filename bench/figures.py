"""The goal figures of `make bench` (issue 28), kept as files and rendered into docs/speed.md.

bench.overhead and bench.scale `record` each figure they print beside a goal; `save` writes them to
results/bench/<part>.json with the machine's state (CPUs, load average, date). `python -m bench.figures` (the
last step of `make bench`) rewrites the block between `<!-- bench:goals -->` and `<!-- /bench -->` of
docs/speed.md from those files, so the page says what the last `make bench` measured, never a typed-in number.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "results" / "bench"
PAGE = ROOT / "docs" / "speed.md"
PARTS = ("overhead", "scale")  # the order of the rendered table
BLOCK = re.compile(r"(<!-- bench:goals -->\n)(.*?)(<!-- /bench -->)", re.S)
_FIGURES: dict[str, list[dict[str, Any]]] = {}


def record(part: str, figure: str, measured: str, goal: str = "", met: bool | None = None) -> None:
    _FIGURES.setdefault(part, []).append({"figure": figure, "measured": measured, "goal": goal, "met": met})


def save(part: str, folder: Path = FOLDER) -> Path:
    """This process's figures of `part`, with the machine's state, as folder/<part>.json (replaced whole)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{part}.json"
    body = {"part": part, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "figures": _FIGURES.get(part, [])}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(body, indent=1) + "\n")
    tmp.replace(path)
    return path


def render(folder: Path = FOLDER) -> str:
    """The Markdown of every saved part's goal figures (a part never measured says so)."""
    lines = []
    for part in PARTS:
        path = folder / f"{part}.json"
        if not path.is_file():
            lines.append(f"`bench.{part}`: not measured yet (run `make bench`).\n")
            continue
        body = json.loads(path.read_text())
        load = ", ".join(f"{x:g}" for x in body["load_average"])
        lines += [f"`bench.{part}`, {body['date']}, {body['cpus']} CPUs, load average {load}:", "",
                  "| figure | measured | goal | |", "|---|---|---|---|"]
        for f in body["figures"]:
            verdict = "" if f["met"] is None else ("met" if f["met"] else "**not met**")
            lines.append(f"| {f['figure']} | {f['measured']} | {f['goal']} | {verdict} |")
        lines.append("")
    return "\n".join(lines)


def rewrite(page: Path = PAGE, folder: Path = FOLDER) -> bool:
    """Replace the page's block with the rendered figures; False (nothing written) if the page has no block."""
    text = page.read_text()
    if not BLOCK.search(text):
        return False
    made = render(folder)
    page.write_text(BLOCK.sub(lambda m: m.group(1) + made + m.group(3), text, count=1))
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--folder", type=Path, default=FOLDER)
    args = parser.parse_args(argv)
    if not rewrite(args.page, args.folder):
        print(f"{args.page}: no <!-- bench:goals --> ... <!-- /bench --> block to rewrite", file=sys.stderr)
        return 1
    print(f"{args.page}: goal figures rewritten from {args.folder}/*.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
