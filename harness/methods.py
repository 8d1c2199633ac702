"""The one registry of context methods and experiments: every name a method goes by, said once.

A context method is a policy class (harness/policies/*.py, harness/waac/policy.py) that declares its registry key
once (`key: ClassVar[str]`); episodes record that key as `method_key`. Everything that names, colours or lists a
method — report/names.py (tables, figures, the viewer), the methods table, the Odysseys/PinchBench tables' paper
rows — reads it from here, so adding a method is: its module, its config (configs/policy/<key>.yaml,
configs/experiment/<key>.yaml) and one `Method(...)` line below. Nothing else.

Experiments that are not a policy of their own are registered too: the expense paper's C1–C4 (Less Context,
Better Agents, Table 1) and WAAC's ablations (WAAC B.3/B.4), each with the method it varies (`variant_of`).
Vocabulary layer: imports only the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """One context method or experiment. Colours come from matplotlib's tab10/tab20 (they print and project well).

    key: the canonical key (configs/experiment/<key>.yaml's `name`, the policy class's `key`);
    display: the name in every table, figure and the viewer; colour: its colour in every figure and the viewer;
    policy_class: the dotted path of the policy class whose `key` this is (None: an experiment over another
    method's class, see `variant_of`); paper: which paper and section it comes from; aliases: other names configs
    and runs give it (a configs/policy file name that is neither the key nor the class in snake case);
    expense: on the expense benchmark this method IS that paper experiment (full history is C2 there);
    paper_row: its row in the WAAC paper's method tables (Tables 1, 2, 4; Vanilla's row is c2), None if not there;
    variant_of: the method an experiment or ablation varies; in_methods_table: a row of the methods comparison.
    """

    key: str
    display: str
    colour: str
    policy_class: str | None = None
    paper: str = ""
    aliases: tuple[str, ...] = ()
    expense: str | None = None
    paper_row: str | None = None
    variant_of: str | None = None
    in_methods_table: bool = True

    @property
    def class_name(self) -> str | None:
        return self.policy_class.rsplit(".", 1)[-1] if self.policy_class else None

    @property
    def label(self) -> str | None:
        """The policy class in snake case (LastN -> last_n): PinchBench/Odysseys run names end with it."""
        return snake(self.class_name) if self.class_name else None


_P = "harness.policies."
# The order is the methods table's row order (then the expense experiments and ablations, which it does not list).
METHODS: tuple[Method, ...] = (
    Method("c1", "C1 (full, no user model)", "#7f7f7f", paper="Less Context, Better Agents, Table 1",
           variant_of="vanilla", in_methods_table=False),
    Method("c2", "C2 (full history)", "#1f77b4", paper="Less Context, Better Agents, Table 1", variant_of="vanilla"),
    Method("c3", "C3 (last 5)", "#ff7f0e", paper="Less Context, Better Agents, Table 1", variant_of="keep_last_n",
           in_methods_table=False),
    Method("c4", "C4 (last 5 + summary)", "#2ca02c", _P + "last_n_summary.LastNSummary",
           paper="Less Context, Better Agents, Table 1 (C4)", in_methods_table=False),
    Method("vanilla", "Vanilla (full history)", "#1f77b4", _P + "full.FullHistory", paper="WAAC §4.1 (Vanilla)",
           aliases=("full",), expense="c2", paper_row="c2", in_methods_table=False),
    Method("keep_last_n", "Keep-Last-N", "#ffbb78", _P + "last_n.LastN", paper="WAAC B.2 (2)", expense="c3",
           paper_row="keep_last_n"),
    Method("masking", "Observation masking", "#98df8a", _P + "masking.ObservationMasking",
           paper="The Complexity Trap; SWE-agent LastNObservations"),
    Method("summary", "Summary", "#e377c2", _P + "summary.SummaryCondenser", paper="WAAC B.2 (5)",
           paper_row="summary"),
    Method("llmlingua", "LLMLingua", "#9467bd", _P + "llmlingua.LLMLinguaPolicy", paper="WAAC B.2 (3)",
           paper_row="llmlingua"),
    Method("lcm", "LCM", "#bcbd22", _P + "lcm.LCM", paper="WAAC B.2 (6)", paper_row="lcm"),
    Method("agentfold", "AgentFold", "#17becf", _P + "agentfold.AgentFold", paper="WAAC B.2", paper_row="agentfold"),
    Method("mem0", "Mem0", "#aec7e8", _P + "mem0_memory.Mem0Memory", paper="WAAC B.2", paper_row="mem0"),
    Method("tokenskip", "TokenSkip", "#8c564b", _P + "tokenskip.TokenSkip", paper="WAAC B.2 (4)",
           paper_row="tokenskip"),
    Method("waac", "WAAC", "#d62728", "harness.waac.policy.WAAC", paper="WAAC §3, Appendix A", paper_row="waac"),
    Method("waac_no_offline", "WAAC w/o Offline", "#ff9896", paper="WAAC B.3", variant_of="waac",
           in_methods_table=False),
    Method("waac_no_online", "WAAC w/o Online", "#c49c94", paper="WAAC B.3", variant_of="waac",
           in_methods_table=False),
    Method("waac_no_summary", "WAAC w/o SUMMARY", "#f7b6d2", paper="WAAC B.4", variant_of="waac",
           in_methods_table=False),
    Method("waac_no_pointer", "WAAC w/o POINTER", "#dbdb8d", paper="WAAC B.4", variant_of="waac",
           in_methods_table=False),
    Method("waac_no_drop", "WAAC w/o DROP", "#9edae5", paper="WAAC B.4", variant_of="waac", in_methods_table=False),
)


def snake(class_name: str) -> str:
    """A class name in snake case (LLMLinguaPolicy -> llm_lingua_policy), as harness.config's policy_label."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", class_name).lower()


def methods() -> tuple[Method, ...]:
    """Every registered method and experiment (read at call time, so a test may register one more)."""
    return METHODS


def method(key: str) -> Method:
    """The registered method or experiment `key`; KeyError names the known keys."""
    for m in methods():
        if m.key == key:
            return m
    raise KeyError(f"no context method {key!r} is registered in harness/methods.py "
                   f"(known: {', '.join(m.key for m in methods())})")


def by_class() -> dict[str, str]:
    """Policy class name -> key (sweeps and budget tables record only the policy's class)."""
    return {m.class_name: m.key for m in methods() if m.class_name}


def by_label() -> dict[str, str]:
    """Snake-case policy labels (run names pinchbench_<label>) and config aliases -> key."""
    out = {m.label: m.key for m in methods() if m.label}
    return out | {a: m.key for m in methods() for a in m.aliases}


def expense_names() -> dict[str, str]:
    """Method key -> the expense paper's experiment for the same policy (vanilla -> c2, keep_last_n -> c3)."""
    return {m.key: m.expense for m in methods() if m.expense}


def paper_rows() -> dict[str, str]:
    """Every name of a method in the WAAC paper's tables (key, snake-case label, alias) -> its row there."""
    out: dict[str, str] = {}
    for m in methods():
        if m.paper_row:
            out |= {name: m.paper_row for name in (m.key, m.label, *m.aliases) if name}
    return out


def paper_rows_by_class() -> dict[str, str]:
    """Policy class name -> its row in the WAAC paper's tables (for runs that record only the class)."""
    return {m.class_name: m.paper_row for m in methods() if m.class_name and m.paper_row}


def table_methods() -> tuple[str, ...]:
    """The methods comparison's rows, in order."""
    return tuple(m.key for m in methods() if m.in_methods_table)


def variants(of: str) -> tuple[str, ...]:
    """The experiments that vary method `of` (WAAC's ablations for "waac")."""
    return tuple(m.key for m in methods() if m.variant_of == of)
