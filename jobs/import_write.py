"""The import's last stage, shared by both engines: commit embedded chunks insert-if-absent, log
messages, run `rules`/`llm` extraction per user, write the rejects file, and report progress."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.embedding import Embedder
from agent_memory.extraction import build_extractor, extract_and_store
from agent_memory.history import ImportMode
from agent_memory.models import MemoryRecord, MessageRecord, turn_order
from agent_memory.service import MemoryService
from agent_memory.settings import Settings
from jobs.import_report import ImportResult
from jobs.progress import ProgressBar
from storage.connect import open_service


class ImportWriter:
    """Commits embedded chunks (insert-if-absent on id) and keeps the counts.

    It writes through `service` when one is given (an open service and its store), else through
    a service it opens on the settings' store (or `store`) once it knows the model's name and size.
    """

    def __init__(self, settings: Settings, result: ImportResult, *, store: Any = None,
                 service: MemoryService | None = None, keep_turns: bool = False,
                 on_commit: Callable[[int], None] | None = None, actor: str = "import") -> None:
        self.settings = settings
        self.actor = actor
        self.result = result
        self.service = service
        self._store = store
        self.on_commit = on_commit
        self.committed = 0
        # Extraction modes keep each user's turns for the per-user extraction after the log is written.
        self.turns: dict[tuple[str, str], list[MessageRecord]] | None = {} if keep_turns else None

    def open(self, model: str, dim: int, embedder: Embedder | None = None) -> MemoryService:
        """The service writing to the store (created for this model, or checked against it)."""
        if self.service is None:
            # The chunks were embedded by the settings' model, here or in the engine's actors.
            self.service = open_service(self.settings, embedder=embedder, with_embedder=False, store=self._store,
                                        model=(model, dim), chinese_gloss=self.settings.embedding.glosses_chinese())
        self.result.embedding_model = model
        return self.service

    def commit_messages(self, message_json: Sequence[str], service: MemoryService) -> None:
        """Log one chunk of messages (one commit per org)."""
        by_org: dict[str, list[MessageRecord]] = {}
        for text in message_json:
            record = MessageRecord.model_validate_json(text)
            by_org.setdefault(record.org_id, []).append(record)
            if self.turns is not None:
                self.turns.setdefault((record.org_id, record.user_id), []).append(record)
        for org, records in by_org.items():
            self.result.messages_logged += len(service.log_messages(org, records))

    def commit(self, batch: dict[str, Any]) -> None:
        """Commit one embedded chunk: its messages, then its memories and their creation events."""
        vectors = np.asarray(batch["vector"], dtype=np.float32)
        if not len(vectors):
            return
        service = self.open(str(batch["model"][0]), int(vectors.shape[1]))
        self.result.embedding_model = str(batch["model"][0])
        self.commit_messages(list(batch["message"]), service)
        by_org: dict[str, list[MemoryRecord]] = {}
        for text, vector, oov in zip(batch["memory"], vectors, batch["oov"], strict=True):
            record = MemoryRecord.model_validate_json(text)
            record.vector = vector.tolist()
            record.oov = float(oov)
            by_org.setdefault(record.org_id, []).append(record)
        for org, records in by_org.items():
            written = service.write_records(org, records, actor=self.actor, on_conflict="skip")
            self.result.memories_written += len(written.created)
            self.result.memories_skipped += len(records) - len(written.created)
        self.committed += len(vectors)
        if self.on_commit is not None:
            self.on_commit(self.committed)

    def extract_per_user(self, mode: ImportMode) -> None:
        """`rules`/`llm`: the logged turns through extraction, one (org, user) at a time, in conversation order."""
        if self.service is None or self.turns is None:
            return
        extractor = build_extractor(self.service.settings, mode, self.service.embedder)
        for (org_id, _user), turns in sorted(self.turns.items()):
            turns.sort(key=lambda m: (m.created_at, m.session_id, turn_order(m.created_at, m.message_id)))
            extracted = extract_and_store(self.service, org_id, turns, mode, actor=self.actor, extractor=extractor)
            # What extraction made of the turns: new memories, restatements folded into one the
            # user had, and candidates already stored by an earlier run of the same file.
            self.result.memories += len(extracted.created) + len(extracted.reinforced) + extracted.unchanged
            self.result.memories_written += len(extracted.created)
            self.result.memories_reinforced += len(extracted.reinforced)
            self.result.memories_superseded += len(extracted.superseded)
            self.result.memories_skipped += extracted.unchanged


def record_rejects(rejects: list[dict[str, Any]], result: ImportResult, path: Path | None) -> None:
    """Count the (already redacted) rejects by reason and, given a path, write them there sorted by line."""
    rejects.sort(key=lambda r: r["line"])
    result.rows_rejected = len(rejects)
    for reject in rejects:
        key = str(reject["reason"]).split(":")[0]
        result.rejects_by_reason[key] = result.rejects_by_reason.get(key, 0) + 1
    if rejects and path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            for reject in rejects:
                handle.write(json.dumps(reject, ensure_ascii=False, default=str) + "\n")


class Progress:
    """The import's progress: a terminal bar fed by rows as they are embedded (it moves while a
    commit's rows are gathered), and the jobs row fed by committed rows."""

    def __init__(self, total: int | None, show: bool, job: Callable[[float], None] | None) -> None:
        self.bar = ProgressBar(total, desc="import", unit="msg", show=show)
        self.total = max(total or 0, 1)
        self.job = job
        self.done = 0

    def stage(self, desc: str, total: int | None = None) -> None:
        """Name the stage on the bar; a `total` starts the count of embedded rows."""
        self.bar.stage(desc, total)
        if total is not None:
            self.total = max(total, 1)

    def embedded(self, rows: int) -> None:
        """Count rows embedded (on the bar)."""
        self.bar.update(rows)

    def __call__(self, done: int) -> None:
        self.done = done
        if self.job is not None:
            self.job(min(done / self.total, 0.99))

    def close(self) -> None:
        """Close the bar (the jobs row gets its final state from the caller)."""
        self.bar.close()
