"""README.md is the front door, docs/*.md the manual: both stay navigable, and what they tell a user to type is real.

On every page (`_support.doc_pages`): the README stays short and links every manual page; every relative link
resolves, a `#fragment` to a heading of its page (GitHub's anchor rule); every `make <target>` is a Makefile target;
every experiment, sweep, env and config-group choice named is a config file; every repository path and `harness.*`
module named exists; and every complete `make run CONFIG=... ARGS='...'` passes the command line's own pre-run check
(`harness.cli.check`: composes the config, refuses unknown keys, settings the benchmark does not read, bad values,
a missing tasks file), so a renamed key, config or module fails here instead of in a reader's terminal.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from _support import ROOT, doc_pages

README = ROOT / "README.md"
DOCS = ROOT / "docs"
CONFIGS = ROOT / "configs"
PINCHBENCH = ROOT / "tests" / "fixtures" / "pinchbench" / "v2"  # a clone in upstream's 2.0 format, for $PINCHBENCH_DIR
GROUPS = tuple(sorted(p.name for p in CONFIGS.iterdir() if p.is_dir()))  # env, experiment, judge, model, ...
# A value the reader fills in: `<clone>`, `...`, `NAME`, `/path/to/skill`, `$PINCHBENCH_DIR`, `c1..c4`.
PLACEHOLDER = re.compile(r"<|\.\.|\bNAME\b|\bKEY\b|\bVALUE\b|/path/to|\$")
# The manual's examples of a mistake: refused, with the message the page quotes (its `...` left out).
MISTAKES = {"CONFIG=c9": ("`make run CONFIG=c9` prints", ["experiment=c9"]),
            "n_taks=5": ("`ARGS='n_taks=5'` prints", ["experiment=c4", "n_taks=5"])}
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`([^`]+)`")
REPO_PATH = re.compile(r"(?<![\w./-])((?:harness|configs|benchmarks|tests|bench|notebooks|docs|\.ci)/[\w./*-]*)")
MODULE = re.compile(r"(?<![\w./])harness(?:\.\w+)+")


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def code(page: Path) -> Iterator[str]:
    """Every fenced block and inline code span of a page, whitespace inside a span collapsed (spans wrap lines)."""
    text = _text(page)
    yield from FENCE.findall(text)
    for span in SPAN.findall(FENCE.sub("", text)):
        yield " ".join(span.split())


def commands(page: Path) -> Iterator[list[str]]:
    """The `make ...` command lines a page shows, split as the shell splits them (comments dropped; a line ending
    in a backslash or inside an open quote continues on the next)."""
    for piece in code(page):
        line = ""
        for raw in piece.splitlines():
            line = f"{line[:-1]} {raw}" if line.endswith("\\") else f"{line}\n{raw}" if line else raw
            try:
                words = shlex.split(line, comments=True)
            except ValueError:  # an open quote: the command goes on on the next line
                continue
            if not line.endswith("\\"):
                if words[:1] == ["make"]:
                    yield words
                line = ""


@cache
def make_targets() -> frozenset[str]:
    return frozenset(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def choices(value: str) -> list[str]:
    """`budget|n_w|methods` and `full,last_n` name several; Markdown tables escape the bar as `\\|`."""
    return [v for v in re.split(r"\\?\||,", value) if v]


def config_exists(group: str, name: str) -> bool:
    return any((CONFIGS / group).glob(f"{name}.yaml")) if "*" in name else (CONFIGS / group / f"{name}.yaml").is_file()


def module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


def module_exists(dotted: str) -> bool:
    """`harness.a.b` is a module or package, or `harness.a.b.Name` a name its module's source defines."""
    parts = dotted.split(".")
    if module_file(parts) is not None:
        return True
    parent = module_file(parts[:-1])
    return parent is not None and re.search(rf"^\s*(?:class |def )?{parts[-1]}\b", parent.read_text(), re.M) is not None


def slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation other than `-` and `_` removed, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", _text(page)), re.M)}


PAGES = doc_pages()
IDS = [_rel(p) for p in PAGES]


# ---- the front door and the links ------------------------------------------------------------------------------
def test_the_readme_is_a_front_door_under_200_lines() -> None:
    assert len(_text(README).splitlines()) < 200


def test_the_readme_links_every_manual_page_and_each_exists() -> None:
    linked = {(README.parent / t.split("#")[0]).resolve() for t in LINK.findall(_text(README)) if t.startswith("docs/")}
    assert linked, "README.md links no docs/ page"
    assert all(p.is_file() for p in linked), sorted(str(p) for p in linked if not p.is_file())
    orphans = sorted(p.name for p in DOCS.glob("*.md") if p.resolve() not in linked)
    assert not orphans, f"docs pages the README does not link: {orphans}"


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(_text(page)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, broken


def test_mkdocs_lists_every_manual_page() -> None:
    """mkdocs.yml (optional: no target builds it) names each docs page once and no other."""
    nav = re.findall(r"^\s*- [^:]+: (\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))


# ---- what the pages tell a user to type ------------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_make_target_exists(page: Path) -> None:
    named = {w[1] for w in commands(page) if len(w) > 1 and "=" not in w[1] and not w[1].startswith("-")}
    unknown = sorted(t for t in named if not PLACEHOLDER.search(t) and t not in make_targets())
    assert not unknown, f"{_rel(page)}: no such make target: {unknown}"


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_config_named_exists(page: Path) -> None:
    """CONFIG= (an experiment), SWEEP=, ENV= and `group=choice` (model=sim_llmlike, judge=agent, policy=waac, ...)."""
    variables = {"CONFIG": "experiment", "SWEEP": "sweep", "ENV": "env"}
    group = re.compile(rf"(?<![\w.+~/-])({'|'.join(GROUPS)}|{'|'.join(variables)})=([\w|\\,.*<>-]+)")
    missing = set()
    for piece in code(page):
        for key, value in group.findall(piece):
            for name in choices(value.rstrip(".")):
                if f"{key}={name}" in MISTAKES or PLACEHOLDER.search(name):
                    continue
                if not config_exists(variables.get(key, key), name):
                    missing.add(f"{key}={name}")
    assert not missing, f"{_rel(page)}: no such config: {sorted(missing)}"


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_repository_path_and_module_named_exists(page: Path) -> None:
    missing = set()
    for piece in code(page):
        for path in REPO_PATH.findall(piece):
            path = path.rstrip(".,:;")
            found = ROOT.glob(path) if "*" in path else [ROOT / path]
            if not PLACEHOLDER.search(path) and not any(p.exists() for p in found):
                missing.add(path)
        missing |= {m for m in MODULE.findall(piece) if not module_exists(m)}
    assert not missing, f"{_rel(page)}: named but not in the repository: {sorted(missing)}"


# The values a reader fills in that the check can be given: the fixture clone, a model name, an archive folder.
FILL = ((re.compile(r"benchmark\.path=(<[^>]*>|\S+)"), f"benchmark.path={PINCHBENCH}"),
        (re.compile(r"model\.model=<agent>"), "model.model=gpt-5-mini"),
        # (replay needs the folder to exist: the committed dev archive stands in for one `source=record` made)
        (re.compile(r"browser\.archive=(\.\.\.|results/har)"), "browser.archive=benchmarks/odysseys/dev/archive"))


def fill(args: str) -> str:
    for pattern, value in FILL:
        args = pattern.sub(value, args)
    return args


def run_commands() -> list[tuple[str, list[str]]]:
    """(page, argv for harness.cli) of every complete `make run` command: the Makefile's `experiment=$(CONFIG)`,
    its `model=` variable, then ARGS as the shell splits them. Commands with a value to fill in are left out."""
    found = []
    for page in PAGES:
        for words in commands(page):
            if words[1:2] != ["run"]:
                continue
            given = dict(w.split("=", 1) for w in words[2:] if "=" in w)
            args = [a for a in shlex.split(fill(given.get("ARGS", ""))) if a != "..."]
            argv = [f"experiment={given.get('CONFIG', 'c4')}",
                    *([f"model={given['model']}"] if "model" in given else []), *args]
            if any(PLACEHOLDER.search(a) or re.search(r"[*|]", a) for a in argv) or any(
                    w in MISTAKES for w in [*words, *args]):  # `CONFIG=waac*|llmlingua` lists choices
                continue
            if (_rel(page), argv) not in found:
                found.append((_rel(page), argv))
    return found


RUNS = run_commands()


def test_the_docs_show_run_commands_of_every_benchmark() -> None:
    """The extraction finds what it should (a broken parser would check nothing)."""
    shown = {a for _, argv in RUNS for a in argv}
    assert {"experiment=c4", "experiment=waac", "experiment=pinchbench", "experiment=odysseys"} <= shown
    assert any("model=sim_llmlike" in argv for _, argv in RUNS)  # the make variable form (`model=` after CONFIG)
    assert any("env=odysseys" in argv and "browser.source=replay" in argv for _, argv in RUNS)  # a multi-line ARGS


def _needs(argv: list[str]) -> list[pytest.MarkDecorator]:
    """The requirement marker of a command's benchmark (tests/conftest.py): its pre-run check builds the benchmark,
    which checks PinchBench's sandbox or loads Odysseys' browser driver."""
    chosen = {a.split("=", 1)[1] for a in argv if a.startswith(("experiment=", "env="))}
    return ([pytest.mark.sandbox] if any(c.startswith("pinchbench") for c in chosen) else []) + (
        [pytest.mark.browser] if any(c.startswith("odysseys") for c in chosen) else []) + (
        [pytest.mark.openclaw_profile] if any(a.startswith("benchmark.agent_profile=openclaw") for a in argv) else [])


@pytest.mark.parametrize(("page", "argv"), [pytest.param(p, a, marks=_needs(a), id=f"{p}:{' '.join(a)}")
                                            for p, a in RUNS])
def test_every_run_command_passes_the_pre_run_check(page: str, argv: list[str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.cli import check

    monkeypatch.chdir(ROOT)  # the commands' relative paths (tests/fixtures/..., benchmarks/...) are the repository's
    monkeypatch.setenv("PINCHBENCH_DIR", str(PINCHBENCH))  # what a bare `make run CONFIG=pinchbench` reads
    argv = [a for a in argv if not a.startswith("out_dir=")] + ([] if "-m" in argv else [f"out_dir={tmp_path / 'o'}"])
    assert check(argv) is None, f"{page}: make run {' '.join(argv)}"



@pytest.mark.parametrize("example", sorted(MISTAKES))
def test_the_manuals_mistakes_are_refused_as_it_says(example: str) -> None:
    from harness.cli import check

    intro, argv = MISTAKES[example]
    quoted = re.search(re.escape(intro) + r"\s+`([^`]+)`", " ".join(_text(DOCS / "operating.md").split()))
    assert quoted, f"docs/operating.md no longer quotes what {intro[:-7]} prints"
    problem = check(argv)
    assert problem is not None and quoted.group(1).removesuffix(", ...") in " ".join(problem.split())
