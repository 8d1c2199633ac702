"""`make view RUN=<folder>` (`python -m harness.report.view PATH [PATH ...] [--out FILE] [--serve] [--port N]`): one
self-contained HTML report that answers "why did this episode fail".

Pages (hash-routed, so each is a link): the runs (`#/`), one run's episodes with filters and sorting
(`#/run/<id>`), one episode as a timeline of steps with what the model saw at each (`#/run/<id>/ep/<episode>` and
`.../step/<n>`), and two runs of one task side by side (`#/compare/<runA>/<runB>/<task or episode>`).

The file needs no server and no network: the CSS and JS (view_assets/) are inlined, a Content-Security-Policy
forbids every fetch, and each episode's data is embedded as gzip+base64, decompressed by the browser
(DecompressionStream) only when the episode is opened, so a 250-episode run stays a few MB. All data goes in
through `<script type="application/json">` blocks that the page reads with JSON.parse, and the JS writes text only
through text nodes: transcripts full of HTML-like text cannot inject markup.

The data comes from harness.report.trajectory (find_runs, load_run, load_episode); this module only packs it.
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
import http.server
import json
import os
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.io import atomic_write
from harness.report import cli, trajectory
from harness.report.runs import reported
from harness.text import json_text, printable

ASSETS = Path(__file__).with_name("view_assets")
# No fetch, frame, font or image from anywhere: the report is offline by construction (inline code only).
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
# Characters that could close or confuse a <script> block; JSON.parse reads the \\u escapes back unchanged.
_SCRIPT_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                                 "\u2029": "\\u2029"})


# ---- packing ---------------------------------------------------------------------------------------------------
def pack(obj: Any) -> str:
    """JSON -> gzip (mtime 0, so the same data gives the same file) -> base64: what the page's inflate() reads."""
    raw = json_text(obj, separators=(",", ":")).encode()  # a lone surrogate (a cut emoji an agent wrote) escaped
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def unpack(text: str) -> Any:
    """The inverse of pack (for tests and for reading a report back)."""
    return json.loads(gzip.decompress(base64.b64decode(text)))


def script_json(obj: Any) -> str:
    """JSON safe inside a <script> element: no `</script>`, `<!--` or line separators can appear in it."""
    text = json_text(obj, separators=(",", ":"))
    return text.translate(_SCRIPT_ESCAPES)


def pack_episode(data: dict[str, Any]) -> str:
    """An episode packed with its long texts stored once: a tool result is shown at many steps, a field's reason
    repeats, so each such text becomes an index into `strings` (about a third smaller for WAAC after gzip)."""
    table: dict[str, int] = {}

    def ref(text: str | None) -> int | None:
        return None if text is None else table.setdefault(text, len(table))

    steps = [{**s, "result": ref(s["result"]), "reply": ref(s["reply"]),
              "shown": [{**m, "text": ref(m["text"])} for m in s["shown"]],
              "fields": [{**f, "why": ref(f["why"])} for f in s["fields"]]} for s in data["steps"]]
    messages = [{**m, "text": ref(m["text"])} for m in data["messages"]]
    return pack({**data, "messages": messages, "steps": steps, "strings": list(table)})


def unpack_episode(text: str) -> dict[str, Any]:
    """The inverse of pack_episode (the page's prepare() does the same in JS)."""
    data: dict[str, Any] = unpack(text)
    strings = data.pop("strings")

    def text_of(i: int | None) -> str | None:
        return None if i is None else strings[i]

    for m in data["messages"]:
        m["text"] = text_of(m["text"])
    for s in data["steps"]:
        s["result"], s["reply"] = text_of(s["result"]), text_of(s["reply"])
        for m in s["shown"]:
            m["text"] = text_of(m["text"])
        for f in s["fields"]:
            f["why"] = text_of(f["why"])
    return data


def stats(episodes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Episode count, share completed and mean score, each over the episodes where it is known (None if none)."""
    done = [bool(e["completed"]) for e in episodes if e.get("completed") is not None]
    scores = [float(e["score"]) for e in episodes if e.get("score") is not None]
    return {"n": len(episodes), "completion": sum(done) / len(done) if done else None,
            "score": sum(scores) / len(scores) if scores else None}


# ---- collecting ------------------------------------------------------------------------------------------------
def collect(paths: Sequence[Path]) -> list[Path]:
    """Every run folder under the given paths (each a run, a sweep or results/), each once, in the order given."""
    seen: dict[Path, Path] = {}
    for path in paths:
        for run in trajectory.find_runs(Path(path)):
            seen.setdefault(run.resolve(), run)
    return list(seen.values())


def report_data(run_paths: Sequence[Path], say: Callable[[str], None] = lambda _: None
                ) -> tuple[dict[str, Any], dict[str, str]]:
    """The index (every run with its episode summaries; small, read at once) and one packed blob per episode
    (keyed by the element id the index names in each summary's `blob`). `say` hears one line per run."""
    index, episodes = report_index(run_paths)
    return index, dict(_packed(episodes, say))


Episodes = list[tuple[Path, str, str]]  # (run folder, episode id, the element id of its packed blob)


def report_index(run_paths: Sequence[Path]) -> tuple[dict[str, Any], Episodes]:
    """The index, and the episodes whose blobs it names, in the order they are to be packed."""
    runs: list[dict[str, Any]] = []
    episodes: Episodes = []
    ids: set[str] = set()
    root = _common_parent(run_paths)
    for path in run_paths:
        run = trajectory.load_run(path, root)
        run["id"] = _unique(str(run["id"]), ids)
        run["stats"] = stats(run["episodes"])
        for summary in run["episodes"]:
            summary["blob"] = f"ep{len(episodes)}"
            episodes.append((path, summary["id"], summary["blob"]))
        runs.append(run)
    _mark_reported(runs, root)
    return {"runs": runs}, episodes


def _packed(episodes: Episodes, say: Callable[[str], None]) -> Iterator[tuple[str, str]]:
    """Each episode's blob id and packed data, one episode read at a time; `say` hears each run as it starts."""
    counts: dict[Path, int] = {}
    for path, _, _ in episodes:
        counts[path] = counts.get(path, 0) + 1
    current = None
    for path, episode_id, blob in episodes:
        if path != current:
            current = path
            say(f"reading {path} ({counts[path]} episodes)")
        try:
            data = trajectory.load_episode(path, episode_id)
        except OSError as exc:  # (not taken for the report's own write failing)
            raise InputError(f"{path}: episode {episode_id}: cannot read it ({exc.strerror})") from None
        yield blob, pack_episode(data)


def _mark_reported(runs: list[dict[str, Any]], root: Path | None) -> None:
    """`reported`: whether the tables and figures use this run (harness.report.runs' one rule, per benchmark):
    the runs page marks it and the compare pickers offer it first."""
    by_benchmark: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_benchmark.setdefault(str(run["benchmark"]), []).append(run)
    for group in by_benchmark.values():
        used = reported([Path(r["path"]).resolve() for r in group], root)
        for run in group:
            run["reported"] = Path(run["path"]).resolve() in used


def _common_parent(run_paths: Sequence[Path]) -> Path | None:
    """Run ids relative to the folder holding every run (short links: `expense_c3`, not the absolute path)."""
    if not run_paths:
        return None
    full = [Path(p).resolve() for p in run_paths]
    common = Path(os.path.commonpath(full))
    return common.parent if common in full else common


def _unique(run_id: str, taken: set[str]) -> str:
    """Two folders with the same id (e.g. run `0` of two sweeps) stay apart in the links: `0`, `0~2`."""
    candidate, n = run_id, 1
    while candidate in taken:
        n += 1
        candidate = f"{run_id}~{n}"
    taken.add(candidate)
    return candidate


# ---- the page --------------------------------------------------------------------------------------------------
def render(index: dict[str, Any], blobs: dict[str, str]) -> str:
    """The whole HTML document: inline CSS, the index, the episode blobs, then the inline JS that reads them."""
    return "".join(document(index, blobs.items()))


def document(index: dict[str, Any], blobs: Iterable[tuple[str, str]]) -> Iterator[str]:
    """The document in pieces, each episode's blob one piece, so a report of many runs is written without being
    held whole (the report of 26 sweep jobs held ~0.7 GB)."""
    css = (ASSETS / "view.css").read_text()
    js = (ASSETS / "view.js").read_text().replace("</script", "<\\/script")
    runs = index["runs"]
    title = printable(f"Trajectories: {runs[0]['display']}" if len(runs) == 1 else f"Trajectories: {len(runs)} runs")
    yield f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>
{css}</style>
</head>
<body>
<header class="top"><h1>{html.escape(title)}</h1><nav class="crumbs" id="crumbs"></nav></header>
<main id="page" data-ready="0"><p>Loading… (this report needs JavaScript)</p></main>
<script type="application/json" id="index">{script_json(index)}</script>
"""
    between = ""  # the blobs one per line
    for key, value in blobs:
        yield f'{between}<script type="application/gzip-base64" id="{html.escape(key)}">{value}</script>'
        between = "\n"
    yield f"""
<script>
{js}</script>
</body>
</html>
"""


def build_report(paths: Sequence[Path], say: Callable[[str], None] = lambda _: None) -> tuple[str, dict[str, Any]]:
    """The HTML for every run under `paths`, and its index (for the summary line the CLI prints)."""
    index, episodes = report_index(collect(paths))
    return "".join(document(index, _packed(episodes, say))), index


def write_report(paths: Sequence[Path], out: Path | None = None, say: Callable[[str], None] = lambda _: None
                 ) -> tuple[Path, dict[str, Any]]:
    """Writes the report (default `<first path>/view.html`) one episode at a time, into a temporary file renamed
    over `out` at the end (a report cut short never replaces the previous one); an unwritable `out` is an
    InputError naming it."""
    out = Path(out) if out is not None else Path(paths[0]) / "view.html"
    if out.is_dir():
        raise InputError(f"--out {out}: is a folder; give the HTML file to write")
    index, episodes = report_index(collect(paths))
    try:
        atomic_write(out, document(index, _packed(episodes, say)))
    except OSError as exc:
        raise InputError(f"--out {out}: cannot write the report ({exc.strerror})") from None
    return out, index


# ---- CLI -------------------------------------------------------------------------------------------------------
def make_server(out: Path, port: int) -> http.server.ThreadingHTTPServer:
    """An HTTP server of the report alone (`GET /<its name>`; any other path is 404: the folder beside it holds the
    run's transcripts and config, or whatever else is there) on 127.0.0.1 only; port 0: any free one. A request
    naming another host is refused (a web page's DNS rebinding would reach it as its own origin)."""
    handler = functools.partial(_ReportHandler, report=out)
    try:
        return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise InputError(f"--port {port}: cannot listen on 127.0.0.1:{port} ({exc.strerror})") from None


def serve(out: Path, port: int) -> None:
    """Serves the report until Ctrl-C (the file works without it; a server only helps to share a link)."""
    server = make_server(out, port)
    print(f"serving http://127.0.0.1:{server.server_address[1]}/{out.name}  (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped")
    finally:
        server.server_close()


class _ReportHandler(http.server.BaseHTTPRequestHandler):
    """GET or HEAD of the one report file; nothing else (no listing, no other file of its folder)."""

    def __init__(self, *args: Any, report: Path, **kwargs: Any) -> None:
        self.report = report
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].strip("[]").lower()
        if host not in ("127.0.0.1", "localhost"):
            self.send_error(421, "this server answers for 127.0.0.1 and localhost only")
            return
        if urllib.parse.unquote(self.path.split("?", 1)[0]) != f"/{self.report.name}":
            self.send_error(404, f"this server serves /{self.report.name} only")
            return
        try:
            data = self.report.read_bytes()
        except OSError:
            self.send_error(404, "the report is gone")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """No line per request on the console."""


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser(__doc__, results=False, out=False, pins=False, prog="python -m harness.report.view")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a run folder, a sweep folder or results/")
    parser.add_argument("--out", type=Path, help="the HTML file to write (default: <first PATH>/view.html)")
    parser.add_argument("--serve", action="store_true", help="also serve it on http://127.0.0.1:PORT")
    parser.add_argument("--port", type=int, default=8000, help="port for --serve (default 8000; 0 = any free one)")
    args = parser.parse_args(argv)
    return cli.run(lambda _: _write_and_serve(args))


def _write_and_serve(args: Any) -> None:
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port {args.port}: not a port number (0-65535; 0 = any free one)")
    out, index = write_report(args.paths, args.out, lambda line: print(line, flush=True))
    n_eps = sum(len(r["episodes"]) for r in index["runs"])
    size = out.stat().st_size / 1e6
    n_runs = len(index["runs"])
    print(f"wrote {out} ({n_runs} run{'' if n_runs == 1 else 's'}, {n_eps} episode{'' if n_eps == 1 else 's'}, "
          f"{size:.1f} MB)")
    print(f"open it in a browser: {out.resolve().as_uri()}")
    if args.serve:
        serve(out, args.port)


if __name__ == "__main__":
    sys.exit(main())  # (main runs its work through cli.run: Ctrl-C is one line)
