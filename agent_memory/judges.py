"""The LLM's parts in consolidation: a summarizer that writes one sentence for a merged cluster,
and a judge that reads the near misses the rules refuse and says which are restatements.

Both talk to the configured OpenAI-compatible endpoint through the one `LLMClient` of
`agent_memory.llm`, so they share its process-wide rate limit, timeouts, retries and backoff, and
their failures are counted with the extractor's. The judge's verdicts are remembered in the store
(`RememberedJudge`), so a pair is paid for once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from pydantic import BaseModel, ValidationError

from agent_memory.clustering import Judge
from agent_memory.errors import UnavailableError
from agent_memory.ids import stable_id
from agent_memory.llm import LLMClient, parse_json
from agent_memory.models import Scope
from agent_memory.settings import Settings
from agent_memory.store import MemoryStore

log = logging.getLogger(__name__)

# Given a cluster's texts (the canonical one first), the one sentence that stands for them.
Summarize = Callable[[Sequence[str]], str]

SUMMARY_PROMPT = (
    "These notes about one user all state the same fact. Write that fact once, as one short "
    "sentence in the language of the notes, keeping every specific detail they agree on. "
    "Answer with the sentence only."
)


class OpenAISummarizer:
    """Writes one canonical sentence for a cluster with an OpenAI-compatible chat model."""

    def __init__(self, client: LLMClient) -> None:
        self.client = client

    def __call__(self, texts: Sequence[str]) -> str:
        """The summary, or the first text when the model answers nothing usable."""
        import openai  # heavy: loaded where an LLM is used

        notes = "\n".join(f"- {t}" for t in texts)
        messages = [{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": notes}]
        try:
            # Free text at temperature 0: the same cluster gets the same sentence on every run.
            answer = self.client.chat(messages, schema=None, temperature=0.0).strip()
        except openai.OpenAIError as exc:  # what the client does not turn into UnavailableError itself
            raise UnavailableError(f"the LLM endpoint failed: {exc}") from exc
        return answer.splitlines()[0].strip() if answer else texts[0]


def build_summarizer(settings: Settings) -> Summarize | None:
    """An LLM summarizer when an LLM is configured, else None (the best representative is kept)."""
    return OpenAISummarizer(LLMClient.from_settings(settings)) if settings.llm.configured else None


JUDGE_PROMPT = (
    "You compare notes an assistant keeps about one user. For each numbered pair, decide whether "
    "both notes state the same fact about the user, in other words or in another language. They "
    "do not when they differ in whom the fact is about, in a thing, place, name or number, in "
    "whether it is negated, or in when it holds (a past habit, a plan, a wish). Answer with JSON "
    'only: {"same": [the numbers of the pairs that state the same fact]}.'
)


class SameFacts(BaseModel):
    """The judge's answer: the numbers of the pairs that state the same fact."""

    same: list[int]


class LLMJudge:
    """Asks an OpenAI-compatible chat model which near-miss pairs are restatements.

    One request per user partition, through the extractor's client (rate limit, retries, backoff).
    When the model fails or answers nothing usable, it gives no verdict (None): the rules'
    clusters stand, and the next run asks again.
    """

    def __init__(self, client: LLMClient) -> None:
        self.client = client
        self.name = f"llm:{client.model}"
        self.unavailable = False

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> set[int] | None:
        """The indices of the pairs the model says state the same fact, or None without a usable answer."""
        notes = {"pairs": [{"pair": k, "a": a, "b": b} for k, (a, b) in enumerate(pairs, start=1)]}
        messages = [
            {"role": "system", "content": JUDGE_PROMPT},
            {"role": "user", "content": json.dumps(notes, ensure_ascii=False)},
        ]
        if self.unavailable:
            return None
        try:
            answer = SameFacts.model_validate(parse_json(self.client.chat(messages, schema=SameFacts, name="same_facts")))
        except UnavailableError:
            # Counted and logged by the client, after its retries: the rest of this run does without.
            self.unavailable = True
            return None
        except (ValueError, ValidationError) as exc:
            log.warning("the consolidation judge's answer was not usable: %s", exc)
            return None
        if any(not 1 <= k <= len(pairs) for k in answer.same):
            log.warning("the consolidation judge named pairs that were not asked about: %s", answer.same)
            return None
        return {k - 1 for k in answer.same}


def build_judge(settings: Settings) -> Judge | None:
    """An LLM judge of near misses when an LLM is configured and the judge is on, else None."""
    if not (settings.llm.configured and settings.consolidation.llm_judge):
        return None
    return LLMJudge(LLMClient.from_settings(settings))


class RememberedJudge:
    """A judge whose verdicts on one user's pairs are kept in the store (table `verdicts`).

    A pair is asked about once per judge: later runs, and the second run right after the first,
    find its verdict instead of paying for the same question again. A pair is keyed by hashes of
    its two texts (in either order), so an edited or summarised memory is asked about afresh.
    At most `budget` pairs a run go to the judge (remembered ones are free); the rest wait for the
    next run, so where the budget binds, results converge over several runs (a doubtful link of
    the rules left unasked merges as the rules say). Verdicts are written
    by `keep`, after the plan is applied and only while the user still has memories, so that an
    erasure during a run leaves none behind; a dry run does not call it.
    """

    def __init__(self, judge: Judge, store: MemoryStore, scope: Scope, now: datetime, *, budget: int) -> None:
        self.judge, self.store, self.scope, self.now, self.budget = judge, store, scope, now, budget
        self.name = str(getattr(judge, "name", type(judge).__name__))
        self.fresh: dict[str, bool] = {}
        self.asked = self.remembered = self.unasked = self.confirmed = self.refused_links = 0

    def pair_id(self, a: str, b: str) -> str:
        """The key of a pair's verdict: this user, this judge, and the two texts in either order."""
        ha, hb = sorted(stable_id("text", text) for text in (a, b))
        return stable_id("verdict", self.scope.org_id, self.scope.user_id, self.name, ha, hb)

    def verdicts(self, pairs: Sequence[tuple[str, str]]) -> dict[int, bool]:
        """Each pair's verdict (the same fact or not), remembered or the judge's on as many unknown
        pairs as the budget allows; a pair left unasked, or asked of a judge that failed, has none."""
        ids = [self.pair_id(a, b) for a, b in pairs]
        known = {**self.store.verdicts(self.scope, ids), **self.fresh}
        out = {k: known[pair_id] for k, pair_id in enumerate(ids) if pair_id in known}
        unknown = [k for k in range(len(pairs)) if k not in out]
        self.remembered += len(out)
        ask, self.unasked = unknown[: max(self.budget, 0)], self.unasked + max(len(unknown) - self.budget, 0)
        if ask:
            self.budget -= len(ask)
            self.asked += len(ask)
            fresh = self.judge([pairs[k] for k in ask])
            if fresh is not None:
                for x, k in enumerate(ask):
                    out[k] = self.fresh[ids[k]] = x in fresh
        return out

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> set[int] | None:
        """The pairs found the same fact (remembered verdicts, and the judge's within the budget)."""
        same = {k for k, verdict in self.verdicts(pairs).items() if verdict}
        self.confirmed += len(same)
        return same

    def refused(self, pairs: Sequence[tuple[str, str]]) -> set[int]:
        """The pairs found to be two facts (linked by the rules, put to the judge for review)."""
        different = {k for k, verdict in self.verdicts(pairs).items() if not verdict}
        self.refused_links += len(different)
        return different

    def keep(self) -> None:
        """Write this run's new verdicts, if the user still has memories (not erased meanwhile)."""
        if not self.fresh or not self.store.has_memories(self.scope):
            return
        try:
            self.store.record_verdicts(self.scope, self.fresh, self.name, self.now)
        except Exception:  # the merges stand; the next run asks again
            log.warning("could not keep the judge's verdicts for %s/%s", self.scope.org_id, self.scope.user_id,
                        exc_info=True)

    def tally(self) -> dict[str, int]:
        """Pairs put to the judge, whose verdict was remembered, left for a later run, found the same
        (near misses linked), and found two facts (the rules' links undone)."""
        return {"asked": self.asked, "remembered": self.remembered, "unasked": self.unasked,
                "confirmed": self.confirmed, "refused": self.refused_links}
