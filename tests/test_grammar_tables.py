"""The grammar tables (agent_memory.grammar): each entry matches every example it gives and none of
its counterexamples, where it is tried (at a clause's start, or anywhere)."""

from __future__ import annotations

import pytest

from agent_memory.grammar import Entry
from agent_memory.grammar.en import EN
from agent_memory.grammar.zh import ZH

TABLES = {"en": EN, "zh": ZH}
CASES = [
    pytest.param(entry, text, wanted, id=f"{lang}:{entry.name}:{'+' if wanted else '-'}{text}")
    for lang, table in TABLES.items() for entry in table.values()
    for wanted, texts in ((True, entry.examples), (False, entry.counterexamples)) for text in texts
]


@pytest.mark.parametrize(("entry", "text", "wanted"), CASES)
def test_an_entry_matches_its_examples_and_not_its_counterexamples(entry: Entry, text: str, wanted: bool) -> None:
    assert entry.matches(text) is wanted


@pytest.mark.parametrize("lang", sorted(TABLES))
def test_every_entry_says_what_it_must_match_and_must_not(lang: str) -> None:
    assert all(entry.examples and entry.counterexamples for entry in TABLES[lang].values())
