"""What WAAC makes from an object once per process, keyed by the object's identity.

A task's later runs meet the same results again, and `schema.split_result` hands them the same parsed Split, so
the values of their fields (and a library's records, replayed at every matching episode) are the very objects an
earlier episode met. What is derived from such an object (its JSON text, its token count, a record's rows as
tuples) is kept by `id(obj)`: hashing the object itself would cost what the memo saves. Each entry holds its
object, so the id is not reused while the entry lives. A memo is bounded by its entries and by the summed size of
what it keeps, and can follow a generation counter: when the counter moves (the split memo let its Splits go),
the memo lets its objects go too, so it never keeps alive more than that memo does.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

V = TypeVar("V")


class IdentityMemo(Generic[V]):
    """make() per (key..., object identity); emptied when a new entry would pass `max_entries` or `max_size`
    (the summed `size` of the kept values) or when `generation()` has moved since it was last emptied."""

    def __init__(self, max_entries: int, max_size: int | None = None, size: Callable[[V], int] | None = None,
                 generation: Callable[[], int] | None = None) -> None:
        self.max_entries, self.max_size = max_entries, max_size
        self._size_of, self._generation_of = size, generation
        self._entries: dict[tuple[Hashable, ...], tuple[object, V]] = {}
        self._size = 0
        self._generation = generation() if generation is not None else 0

    def get(self, obj: object, make: Callable[[], V], *key: Hashable) -> V:
        k = (*key, id(obj))
        hit = self._entries.get(k)
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = make()
        self._admit(k, obj, value)
        return value

    def holds(self, obj: object, *key: Hashable) -> bool:
        hit = self._entries.get((*key, id(obj)))
        return hit is not None and hit[0] is obj

    def clear(self) -> None:
        self._entries.clear()
        self._size = 0

    def __iter__(self) -> Iterator[tuple[Hashable, ...]]:
        return iter(self._entries)  # the keys: (key..., id of the object)

    def __len__(self) -> int:
        return len(self._entries)

    def _admit(self, k: tuple[Hashable, ...], obj: object, value: V) -> None:
        n = self._size_of(value) if self._size_of is not None else 0
        generation = self._generation_of() if self._generation_of is not None else 0
        if (len(self._entries) >= self.max_entries or generation != self._generation
                or (self.max_size is not None and self._size + n > self.max_size)):
            self.clear()  # (a value larger than max_size alone is still kept, by itself)
            self._generation = generation
        self._entries[k] = (obj, value)
        self._size += n
