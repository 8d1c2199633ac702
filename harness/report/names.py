"""One display name and one colour per experiment, shared by every table, figure and the viewer.

An experiment is named by its config (`c3`, `waac_no_pointer`, `pinchbench_last_n`, ...) or, in sweeps and
budget tables, only by its policy class (`LastN`); `key()` maps both onto one canonical key, so C2 is "C2" in
every output and never "FullHistory" or "('FullHistory', 1.0)". On the expense benchmark the full-history,
last-5 and last-5+summary policies *are* the paper's C2, C3 and C4 (Less Context, Better Agents, Table 1); on
PinchBench and Odysseys the WAAC paper calls full history "Vanilla" (WAAC §4.1).
"""

from __future__ import annotations

import re

# canonical key -> (display name, colour); colours from matplotlib's tab10/tab20 so they print and project well
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "c1": ("C1 (full, no user model)", "#7f7f7f"),
    "c2": ("C2 (full history)", "#1f77b4"),
    "c3": ("C3 (last 5)", "#ff7f0e"),
    "c4": ("C4 (last 5 + summary)", "#2ca02c"),
    "vanilla": ("Vanilla (full history)", "#1f77b4"),
    "keep_last_n": ("Keep-Last-N", "#ffbb78"),
    "llmlingua": ("LLMLingua", "#9467bd"),
    "tokenskip": ("TokenSkip", "#8c564b"),
    "summary": ("Summary", "#e377c2"),
    "lcm": ("LCM", "#bcbd22"),
    "agentfold": ("AgentFold", "#17becf"),
    "mem0": ("Mem0", "#aec7e8"),
    "masking": ("Observation masking", "#98df8a"),
    "waac": ("WAAC", "#d62728"),
    "waac_no_offline": ("WAAC w/o Offline", "#ff9896"),
    "waac_no_online": ("WAAC w/o Online", "#c49c94"),
    "waac_no_summary": ("WAAC w/o SUMMARY", "#f7b6d2"),
    "waac_no_pointer": ("WAAC w/o POINTER", "#dbdb8d"),
    "waac_no_drop": ("WAAC w/o DROP", "#9edae5"),
}
# policy classes (sweeps record only the policy) and snake-case policy labels (pinchbench_<label>, odysseys_<label>)
POLICIES = {"FullHistory": "vanilla", "LastN": "keep_last_n", "LastNSummary": "c4", "SummaryCondenser": "summary",
            "LLMLinguaPolicy": "llmlingua", "TokenSkip": "tokenskip", "LCM": "lcm", "AgentFold": "agentfold",
            "Mem0Memory": "mem0", "ObservationMasking": "masking", "WAAC": "waac"}
LABELS = {"full_history": "vanilla", "last_n": "keep_last_n", "last_n_summary": "c4", "summary_condenser": "summary",
          "llm_lingua_policy": "llmlingua", "token_skip": "tokenskip", "lcm": "lcm", "agent_fold": "agentfold",
          "mem0_memory": "mem0", "observation_masking": "masking", "waac": "waac", "full": "vanilla"}
EXPENSE_POLICIES = {"vanilla": "c2", "keep_last_n": "c3"}  # the expense paper's names for the same policies
PREFIXES = ("pinchbench_workflow_", "pinchbench_", "odysseys_")
FALLBACK_COLOURS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#5254a3", "#8ca252", "#bd9e39")


def key(name: str, benchmark: str | None = None) -> str:
    """The canonical key of an experiment name, policy class or policy label (unknown names come back as given)."""
    name = str(name).strip()
    bare = next((name.removeprefix(p) for p in PREFIXES if name.startswith(p)), name)
    found = POLICIES.get(bare) or LABELS.get(bare) or (bare if bare in EXPERIMENTS else None)
    found = found or ("vanilla" if bare in ("pinchbench", "odysseys", "pinchbench_workflow") else None)
    if found is None:
        return name
    expense = benchmark in (None, "expense") and bare == name  # a prefixed name is never an expense experiment
    if found == "c2" and not expense:
        return "vanilla"  # the WAAC paper's name for full history on PinchBench and Odysseys (§4.1)
    return EXPENSE_POLICIES.get(found, found) if expense and bare in POLICIES | LABELS else found


def display(name: str, benchmark: str | None = None) -> str:
    """The experiment's display name ("C2 (full history)", "WAAC w/o POINTER"); an unknown name stays as given."""
    k = key(name, benchmark)
    return EXPERIMENTS[k][0] if k in EXPERIMENTS else re.sub(r"_+", " ", str(name))


def short(name: str, benchmark: str | None = None) -> str:
    """The display name without its parenthesised gloss ("C2"), for narrow table columns and legends."""
    return display(name, benchmark).split(" (")[0]


def colour(name: str, benchmark: str | None = None) -> str:
    """One colour per experiment in every figure; unknown names get a stable colour from their text."""
    k = key(name, benchmark)
    if k in EXPERIMENTS:
        return EXPERIMENTS[k][1]
    return FALLBACK_COLOURS[sum(map(ord, k)) % len(FALLBACK_COLOURS)]
