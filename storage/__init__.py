"""LanceDB storage for agent-memory: schemas, tenant-scoped queries, indexes, batched writes, erasure."""

from storage.lance_store import LanceStore, open_store

__all__ = ["LanceStore", "open_store"]
