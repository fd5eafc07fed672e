"""The grammar the extractor keeps, as data: named entries in one table per language
(`agent_memory.grammar.en`, `agent_memory.grammar.zh`), each with its pattern, the examples it must
match and the counterexamples it must not (one parametrized unit test runs them all).

What the tables hold: who speaks (the user, someone else, someone of the user's), changes of mind
(what takes back, what says what holds now, the old value named), and corrections said on the spot.
`agent_memory.clauses` reads a turn with them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One named pattern of a language's grammar, with what it must and must not match.

    `anchored`: the entry is tried at the start of a clause (`match`), else anywhere (`search`).
    """

    name: str
    pattern: re.Pattern[str]
    examples: tuple[str, ...]
    counterexamples: tuple[str, ...] = ()
    anchored: bool = False

    def matches(self, text: str) -> bool:
        """Whether the entry matches a text, where it is tried (start, or anywhere)."""
        return bool(self.match(text) if self.anchored else self.search(text))

    def search(self, text: str) -> re.Match[str] | None:
        return self.pattern.search(text)

    def match(self, text: str) -> re.Match[str] | None:
        return self.pattern.match(text)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self.pattern.finditer(text)

    def sub(self, repl: str, text: str) -> str:
        return self.pattern.sub(repl, text)


def entry(name: str, pattern: str, *, examples: tuple[str, ...], counterexamples: tuple[str, ...] = (),
          anchored: bool = False, flags: int = 0) -> Entry:
    """A named entry, its pattern compiled."""
    return Entry(name, re.compile(pattern, flags), examples, counterexamples, anchored)


def table(*entries: Entry) -> dict[str, Entry]:
    """A language's entries by name (each name once)."""
    named = {e.name: e for e in entries}
    if len(named) != len(entries):
        raise ValueError("two entries of one table share a name")
    return named
