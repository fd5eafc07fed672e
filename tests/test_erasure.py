"""Erasure: after erase_user, no retained Lance version of any table holds the user's data."""

from __future__ import annotations

import pyarrow as pa

from agent_memory.models import OrgScope, Scope
from agent_memory.service import MemoryService
from storage.connect import maintenance_of
from storage.schema import TABLES

CANARY = "zebracanary7731"


def _versions_holding(service: MemoryService, needle: str) -> list[tuple[str, int]]:
    """Every (table, version) in which any string cell contains `needle`, reading each version in full."""
    found = []
    for name in TABLES:
        table = maintenance_of(service.store).table(name)
        for version in maintenance_of(service.store).versions(name):
            table.checkout(version)
            data: pa.Table = table.to_arrow()
            for column in data.column_names:
                values = data.column(column).to_pylist()
                if any(needle in str(v) for v in values if v is not None):
                    found.append((name, version))
                    break
        table.checkout_latest()
    return found


def test_erase_user_leaves_nothing_in_any_version(service: MemoryService) -> None:
    victim, bystander = "erin", "bob"
    for i in range(3):
        service.add("acme", {"user_id": victim, "content": f"my codeword is {CANARY} number {i}", "metadata": {"tag": CANARY}})
    memory_id = service.add("acme", {"user_id": victim, "content": "plain note"})
    service.update(Scope.user("acme", victim), memory_id, {"content": f"edited to {CANARY}"})
    records = service.message_records("acme", victim, "s1", [{"role": "user", "content": f"log {CANARY}"}])
    service.log_messages("acme", records)
    service.store.put_job(OrgScope("acme"), {"id": "job-1", "org_id": "acme", "user_id": victim, "kind": "import",
                                   "state": "succeeded", "created_at": service.clock(),
                                   "updated_at": service.clock(), "report": {"sample": CANARY}})
    keep = service.add("acme", {"user_id": bystander, "content": "bob likes chess"})
    hits = service.recall("acme", {"user_id": victim, "query": CANARY})
    service.access.flush()
    assert hits.memories
    assert _versions_holding(service, CANARY), "the canary must be visible before erasure"

    counts = service.erase_user("acme", victim, actor="test")

    assert counts["memories"] == 4 and counts["messages"] == 1 and counts["jobs"] == 1
    assert counts["access"] == len(hits.memories)  # the recall hits logged for them, too
    assert service.store.pending_access(Scope.user("acme", victim)) == {}
    assert _versions_holding(service, CANARY) == []
    # The full-text index was rebuilt without the user: no version's index can find the canary.
    memories = maintenance_of(service.store).table("memories")
    for version in maintenance_of(service.store).versions("memories"):
        memories.checkout(version)
        assert memories.search(CANARY.lower(), query_type="fts", fts_columns="keywords").to_list() == []
    memories.checkout_latest()
    # Bystanders are intact; one content-free event records the erasure.
    assert service.get(Scope.user("acme", bystander), keep).content == "bob likes chess"
    events = maintenance_of(service.store).table("events").to_arrow().to_pylist()
    erased = [e for e in events if e["action"] == "erased"]
    assert len(erased) == 1 and erased[0]["user_id"] == victim and CANARY not in str(erased[0])
    assert service.recall("acme", {"user_id": victim, "query": CANARY}).memories == []
