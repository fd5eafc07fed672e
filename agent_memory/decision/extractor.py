"""Candidates the grammar proposes, each with the learned decision's probability as its confidence.

The rules extractor proposes what its patterns and clause grammar find. Two more kinds of text are
scored beside its candidates, in English only (Chinese candidates are scored whole, through their
English gloss):

- the sentences of a user turn that none of its candidates covers, as the grammar's statement of
  them (without requests, questions, hypotheticals and passing talk), so that the model can take a
  fact that the grammar's reading of who speaks left out ("Cars are my thing.", "Small town for me");
- the clauses of a plain statement of several clauses (not a change of mind, an instruction, an
  answer or a rule's slot), so that what the model rejects in it is left out of the memory
  ("Bringing something to a potluck on Saturday and I have type 1 diabetes." keeps "I have type 1
  diabetes.").

Each candidate's confidence becomes the model's probability that it states a durable fact about
the user, blended with the confidence its rule gave (`RULE_WEIGHT` of it: a rule that is more sure
lets a borderline probability through); extraction then stores only those at or above
`extraction_min_confidence`. A change of mind and an instruction keep at least the confidence their
rule gave: who takes back what, and what the agent is told to do, stay the grammar's to decide.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from agent_memory.clauses import clauses, statement
from agent_memory.decision.features import contexts, embedded_text, signals
from agent_memory.decision.model import BUNDLED, DecisionModel
from agent_memory.embedding.base import Embedder
from agent_memory.models import MessageRecord
from agent_memory.rules import ProposedMemory, RulesExtractor, sentences
from agent_memory.text import is_chinese, terms

# A sentence whose words are this much inside the turn's candidates is already proposed.
_COVERED = 0.5
# The word that joined a clause to the one before, left out when that one is.
_JOINED = re.compile(r"^\s*(?:and|but|so|then|because|although|though|while|whereas|even though|plus)\b[\s,]*",
                     re.IGNORECASE)
_SEPARATORS = ",，;；:：—– "
# The share of a candidate's confidence that is its rule's own, the rest the model's probability
# (chosen on the dev halves and Multi-Session Chat's training dialogues, see the card).
RULE_WEIGHT = 0.2


def _left_out(sentence: str, proposed: list[set[str]]) -> bool:
    words = set(terms(sentence, keep_stopwords=True))
    return bool(words) and not any(len(words & p) >= _COVERED * len(words) for p in proposed)


def _says_something(text: str) -> bool:
    return len(terms(text, keep_stopwords=True)) >= 2 and bool(terms(text))


def proposals(messages: Sequence[MessageRecord], rules: RulesExtractor, *, sentences_too: bool = True) -> list[ProposedMemory]:
    """The rules' candidates and, with `sentences_too`, every user sentence they leave out, in message order."""
    by_message: dict[str, list[ProposedMemory]] = {}
    for candidate in rules.extract(messages):
        by_message.setdefault(candidate.message.message_id, []).append(candidate)
    out: list[ProposedMemory] = []
    for message in messages:
        mine = by_message.get(message.message_id, [])
        out += mine
        if message.role != "user" or not sentences_too:
            continue
        proposed = [set(terms(c.content, keep_stopwords=True)) for c in mine]
        for sentence in sentences(message.content):
            if not _left_out(sentence, proposed):
                continue
            text = statement(sentence)
            if not _says_something(text) or is_chinese(text):
                continue
            out.append(ProposedMemory(content=text, memory_type="semantic", importance=0.5, confidence=0.0,
                                 source_ids=[message.message_id], message=message, extractor=rules.name, rule="sentence"))
            proposed.append(set(terms(text, keep_stopwords=True)))
    return out


def _pieces(text: str) -> list[str]:
    return [c for c in clauses(text) if c.strip(_SEPARATORS)]


def parts(candidate: ProposedMemory) -> list[ProposedMemory]:
    """The clauses of a plain statement of two or more, each as a candidate of its own; none for a
    change of mind, an instruction, an answer, a rule's slot, or text the model cannot read."""
    if (candidate.retracts or candidate.replaces or candidate.slot or candidate.memory_type == "procedural"
            or candidate.rule in ("answer", "clause.instruction") or is_chinese(candidate.content)):
        return []
    pieces = _pieces(candidate.content)
    if len(pieces) < 2:
        return []
    return [replace(candidate, content=piece.strip().rstrip(_SEPARATORS), rule=f"{candidate.rule}/part")
            for piece in pieces]


def joined(pieces: Sequence[str]) -> str:
    """Kept clauses as one statement: without the word that joined the first to one left out."""
    text = " ".join(p.strip() for p in pieces).rstrip(_SEPARATORS)
    return _JOINED.sub("", text, count=1)


def _grammar_decides(candidate: ProposedMemory) -> bool:
    """A change of mind (what it takes back, what it replaces) or an instruction for the agent."""
    return bool(candidate.retracts or candidate.replaces) or candidate.memory_type == "procedural"


def score(model: DecisionModel, candidates: Sequence[ProposedMemory], messages: Sequence[MessageRecord],
          embedder: Embedder | None) -> np.ndarray:
    """Each candidate's probability of stating a durable fact about the user."""
    if not candidates:
        return np.zeros(0)
    where = contexts(messages)
    rows = np.asarray([signals(c, where[c.message.message_id]) for c in candidates], dtype=np.float32)
    texts = [embedded_text(c.content) for c in candidates]
    readable = np.full(len(candidates), embedder is not None)
    vectors = None
    if embedder is not None:
        vectors = np.asarray(embedder.embed_batch(texts), dtype=np.float32)
        for candidate, text, vector in zip(candidates, texts, vectors, strict=True):
            # Extraction stores the same vector for the same text rather than asking the model again.
            candidate.vector = vector.tolist() if text == candidate.content else None
    return model.probabilities(rows, vectors, readable)


class DecidedExtractor:
    """The rules extractor's candidates (and the sentences it leaves out), confidence set by the model
    and, for `rule_weight` of it, by the rule that proposed each.

    A sentence the rules leave out is proposed only with `sentence_bar` (None: never) and kept only
    where its probability reaches that bar, higher than the one extraction holds candidates to: the
    grammar did not read it as the user's, and the project's own sets find such sentences mostly
    someone else's or passing (see the card).

    A clause of a statement whose probability is under `drop_below` is left out of it (only where
    another clause reaches the model's recommended threshold): a clause between the two stays, so
    that what elaborates the fact ("around HSK 3 level") or corrects it is not cut.
    """

    name = "rules"

    def __init__(self, model: DecisionModel, embedder: Embedder | None, *, rules: RulesExtractor | None = None,
                 sentence_bar: float | None = None, drop_below: float = 0.0, rule_weight: float = RULE_WEIGHT) -> None:
        self.model = model
        self.embedder = embedder
        self.rules = rules or RulesExtractor()
        self.sentence_bar = sentence_bar
        self.drop_below = drop_below
        self.rule_weight = rule_weight

    @classmethod
    def bundled(cls, embedder: Embedder | None, **options: object) -> DecidedExtractor:
        """The decision shipped in the package."""
        return cls(DecisionModel.load(BUNDLED), embedder, **options)  # type: ignore[arg-type]

    def extract(self, messages: Sequence[MessageRecord], existing: Sequence[object] = ()) -> list[ProposedMemory]:
        """Candidates in message order, each with the model's probability (blended with its rule's
        confidence) as its confidence."""
        candidates = proposals(messages, self.rules, sentences_too=self.sentence_bar is not None)
        split = [parts(c) for c in candidates]
        flat = [*candidates, *(p for ps in split for p in ps)]
        p = score(self.model, flat, messages, self.embedder)
        at = len(candidates)
        for i, candidate in enumerate(candidates):
            # A change of mind and an instruction are the grammar's to find: the model may raise
            # their confidence, not take them back from what the rule gave.
            floor = candidate.confidence if _grammar_decides(candidate) else 0.0
            # A sentence the rules left out has no rule's confidence to blend.
            weight = 0.0 if candidate.rule == "sentence" else self.rule_weight
            blended = (1 - weight) * float(p[i]) + weight * candidate.confidence
            candidate.confidence = round(max(blended, floor), 4)
            pieces, scores = split[i], p[at:at + len(split[i])]
            at += len(pieces)
            raw = _pieces(candidate.content) if pieces else []
            kept = [text for text, s in zip(raw, scores, strict=True) if s >= self.drop_below]
            if kept and len(kept) < len(pieces) and scores.max() >= self.model.threshold:
                # What the model rejects of the statement is left out of it.
                candidate.content, candidate.vector = joined(kept), None
                candidate.confidence = round(float(max(p[i], scores.max())), 4)
        # A sentence the grammar did not read as the user's needs more than the usual bar.
        bar = self.sentence_bar if self.sentence_bar is not None else 1.0
        return [c for c in candidates if c.rule != "sentence" or c.confidence >= bar]
