"""What an import is asked to do (`ImportOptions`) and what it did (`ImportResult`, its one report)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agent_memory.history import ImportMode

Engine = Literal["auto", "ray", "local"]
# The history formats (`agent_memory.history`) and the chat exports (`jobs.import_exports`).
ImportFormat = Literal["auto", "jsonl", "csv", "parquet", "chatgpt", "claude"]


@dataclass
class ImportOptions:
    """What to import and how."""

    path: str
    fmt: ImportFormat = "auto"
    mode: ImportMode = "raw"
    org_id: str = "default"
    engine: Engine = "auto"
    report_path: str | None = None
    rejects_path: str | None = None
    job_id: str | None = None
    show_progress: bool = True
    # Submitted over HTTP, a file may only write to the caller's org: rows naming another are rejected.
    only_org: bool = False
    # `org_id` is every row's org, whatever a row names (the demo loads the sample into `default`).
    force_org: bool = False
    # The user of every turn of a chat export (ChatGPT, Claude), which names none; required for those.
    user_id: str | None = None
    # The audit actor of what the import writes: over HTTP, the caller's key name.
    actor: str = "import"


@dataclass
class ImportResult:
    """The counts of one run; `as_dict` is the JSON report."""

    path: str
    mode: str
    engine: str = "local"
    # The org of rows that name none (an erasure reads it to find the org's rejects).
    org_id: str | None = None
    rows_read: int = 0
    rows_rejected: int = 0
    messages: int = 0
    messages_logged: int = 0
    memories: int = 0
    memories_written: int = 0
    memories_skipped: int = 0
    memories_reinforced: int = 0
    memories_superseded: int = 0
    redactions: dict[str, int] = field(default_factory=dict)
    rejects_by_reason: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0
    report_path: str | None = None
    rejects_path: str | None = None
    embedding_model: str | None = None

    @property
    def rows_per_s(self) -> float:
        """Rows read per second of the whole run."""
        return self.rows_read / self.duration_s if self.duration_s else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The final JSON report."""
        return {
            "path": self.path, "mode": self.mode, "engine": self.engine, "org_id": self.org_id,
            "rows_read": self.rows_read,
            "rows_rejected": self.rows_rejected, "rejects_by_reason": self.rejects_by_reason,
            "messages": self.messages, "messages_logged": self.messages_logged, "memories": self.memories,
            "memories_written": self.memories_written, "memories_skipped": self.memories_skipped,
            "memories_reinforced": self.memories_reinforced, "memories_superseded": self.memories_superseded,
            "redactions": dict(sorted(self.redactions.items())), "duration_s": round(self.duration_s, 3),
            "rows_per_s": round(self.rows_per_s, 1), "embedding_model": self.embedding_model,
            "report_path": self.report_path, "rejects_path": self.rejects_path,
        }


def add_counts(into: dict[str, int], counts: dict[str, int]) -> None:
    """Add counts by kind (redactions, reject reasons) into a running total."""
    for kind, n in counts.items():
        into[kind] = into.get(kind, 0) + int(n)
