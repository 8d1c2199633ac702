"""The tool-pair bookkeeping of a history that grows by appending, kept from one step to the next.

tool_pairs and keep_pairs_indexed (harness.policies.base) walk the whole history at every step: at 300 steps
(600 messages) that was ~0.9 ms of Keep-Last-N's ~3 ms of client CPU per call, for a view of five pairs. A
PairScan reads each message once, when it is appended, and keeps what the view needs of it: its calls, where
its result sits, and the message as a view shows it once none of its calls is kept (the *skeleton*: the
conversation's own messages, an evicted turn's text). A view of the last pairs is then the skeleton up to the
first kept call plus the tail from there, as keep_pairs_indexed would have made it.

The results equal base's functions over the same history (tests/test_pair_scan.py compares them on random
histories); a history that is not the one scanned grown by appending is scanned afresh."""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections.abc import Sequence

from harness.policies.base import Pair, keep_pairs_indexed, with_calls
from harness.types import Message


class PairScan:
    """One policy's scan of its conversation; `update(history)` before the other methods, every render."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._seen: list[Message] = []  # the scanned messages, held so that identity checks stay sound
        self._calls: list[tuple[str, int]] = []  # (call id, index of its message), in history order
        self._results: dict[str, int] = {}  # call id -> index of its result (the last one, as tool_pairs)
        self._first_result: dict[str, int] = {}  # call id -> index of its first result (a view keeps them all)
        self._call_ids: set[str] = set()
        self._repeated: set[str] = set()  # call ids made more than once (a view keeps a kept id's every call)
        self._skeleton: list[tuple[int, Message]] = []  # each message as a view shows it with no pair kept
        self._skeleton_at: list[int] = []  # the skeleton's history indices, for bisect

    def update(self, history: Sequence[Message]) -> PairScan:
        n = len(self._seen)
        if len(history) < n or not all(map(operator.is_, self._seen, history)):
            self._reset()  # another history: scanned afresh
            n = 0
        for i in range(n, len(history)):
            self._add(i, history[i])
        return self

    def _add(self, i: int, m: Message) -> None:
        self._seen.append(m)
        if m.role == "tool":
            self._results[m.tool_call_id] = i  # type: ignore[index]  # as tool_pairs: a None id is a key too
            self._first_result.setdefault(m.tool_call_id, i)  # type: ignore[arg-type]
            return
        if m.tool_calls:
            for c in m.tool_calls:
                self._calls.append((c.id, i))
                (self._repeated if c.id in self._call_ids else self._call_ids).add(c.id)
            if not m.content:
                return  # with all of its calls evicted it is dropped
            m = with_calls(m, ())  # as keep_pairs_indexed shows it with all of its calls evicted
        self._skeleton.append((i, m))
        self._skeleton_at.append(i)

    @property
    def n_pairs(self) -> int:
        return len(self._calls)

    def call_ids(self, start: int = 0) -> list[str]:
        """[p.call_id for p in tool_pairs(history)[start:]]."""
        return [cid for cid, _ in self._calls[start:]]

    def pairs(self, start: int = 0, stop: int | None = None) -> list[Pair]:
        """tool_pairs(history)[start:stop]."""
        return [Pair(cid, ci, self._results.get(cid)) for cid, ci in self._calls[start:stop]]

    def last_pairs_start(self, n: int) -> int:
        """Where the last n pairs begin (split_pairs' cut)."""
        return max(0, len(self._calls) - n)

    def last_rounds_start(self, n: int) -> int:
        """Where the pairs of the last n assistant turns that made calls begin (split_rounds' cut)."""
        if n <= 0:
            return len(self._calls)
        turns, k = 0, len(self._calls)
        while k > 0:
            turn = self._calls[k - 1][1]
            turns += 1
            if turns > n:
                break
            while k > 0 and self._calls[k - 1][1] == turn:
                k -= 1
        return k

    def keep_tail(self, history: Sequence[Message], start: int) -> list[tuple[int, Message]]:
        """keep_pairs_indexed(history, ids of pairs(start)): pairs from `start` on kept, all earlier evicted."""
        kept = self._calls[start:]
        keep = {cid for cid, _ in kept}
        first = kept[0][1] if kept else len(history)
        if not keep.isdisjoint(self._repeated) or any(self._first_result.get(cid, first) < first for cid in keep):
            return keep_pairs_indexed(history, keep)  # a repeated id, a result before its call: the plain walk
        head = self._skeleton[:bisect_left(self._skeleton_at, first)]
        tail = keep_pairs_indexed(history[first:], keep)
        return head + [(first + i, m) for i, m in tail]
