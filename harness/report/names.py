"""One display name and one colour per experiment, shared by every table, figure and the viewer.

An experiment is named by its config (`c3`, `waac_no_pointer`, `pinchbench_last_n`, ...) or, in sweeps and
budget tables, only by its policy class (`LastN`); `key()` maps both onto one canonical key, so C2 is "C2" in
every output and never "FullHistory" or "('FullHistory', 1.0)". On the expense benchmark the full-history,
last-5 and last-5+summary policies *are* the paper's C2, C3 and C4 (Less Context, Better Agents, Table 1); on
PinchBench and Odysseys the WAAC paper calls full history "Vanilla" (WAAC §4.1).

Every name, colour and alias comes from the one registry, harness/methods.py; nothing here lists a method.
"""

from __future__ import annotations

import re

from harness import methods

PREFIXES = ("pinchbench_workflow_", "pinchbench_", "odysseys_")
BENCHMARK_RUNS = ("pinchbench", "odysseys", "pinchbench_workflow")  # a benchmark's run with full history
FALLBACK_COLOURS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#5254a3", "#8ca252", "#bd9e39")


def _registered() -> dict[str, methods.Method]:
    return {m.key: m for m in methods.methods()}


def key(name: str, benchmark: str | None = None) -> str:
    """The canonical key of an experiment name, policy class or policy label (unknown names come back as given)."""
    name = str(name).strip()
    bare = next((name.removeprefix(p) for p in PREFIXES if name.startswith(p)), name)
    classes, labels = methods.by_class(), methods.by_label()
    found = classes.get(bare) or labels.get(bare) or (bare if bare in _registered() else None)
    found = found or ("vanilla" if bare in BENCHMARK_RUNS else None)
    if found is None:
        return name
    expense = benchmark in (None, "expense") and bare == name  # a prefixed name is never an expense experiment
    if found == "c2" and not expense:
        return "vanilla"  # the WAAC paper's name for full history on PinchBench and Odysseys (§4.1)
    renamed = methods.expense_names()  # the expense paper's names for the same policies (vanilla -> c2)
    return renamed.get(found, found) if expense and (bare in classes or bare in labels) else found


def display(name: str, benchmark: str | None = None) -> str:
    """The experiment's display name ("C2 (full history)", "WAAC w/o POINTER"); an unknown name stays as given."""
    found = _registered().get(key(name, benchmark))
    return found.display if found else re.sub(r"_+", " ", str(name))


def short(name: str, benchmark: str | None = None) -> str:
    """The display name without its parenthesised gloss ("C2"), for narrow table columns and legends."""
    return display(name, benchmark).split(" (")[0]


def colour(name: str, benchmark: str | None = None) -> str:
    """One colour per experiment in every figure; unknown names get a stable colour from their text."""
    k = key(name, benchmark)
    found = _registered().get(k)
    if found:
        return found.colour
    return FALLBACK_COLOURS[sum(map(ord, k)) % len(FALLBACK_COLOURS)]
