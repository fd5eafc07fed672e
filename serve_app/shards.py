"""Writer shards: every change of one user goes to one Writer, chosen by a hash of (org, user).

    ingress --hash(org, user) % N--> Writer, Writer-1, ..., Writer-(N-1)    (one deployment each)

Each shard is a deployment of its own with one replica, so a request reaches its shard by the
handle the ingress picks, with no custom request router: Serve restarts a shard's replica where it
fails, and the users of that shard wait for it while the other shards go on. Within a shard the
Writer keeps its users' order, idempotency and commit batching as a single Writer does.

A batch write that spans users is split by shard; every part carries the positions its memories
had in the request, so the ids a retry under the same idempotency key derives are the same and
insert-if-absent stores nothing twice. The request is acknowledged once every part has committed.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent_memory.models import NewMemory

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle

PRIMARY = "Writer"


def shard_name(index: int) -> str:
    """The deployment name of shard `index`: `Writer` for the first (a one-shard app is unchanged)."""
    return PRIMARY if index == 0 else f"{PRIMARY}-{index}"


def shard_of(org_id: str, user_id: str, shards: int) -> int:
    """The shard of a user: a stable hash (the same in every process and release), not Python's."""
    if shards <= 1:
        return 0
    digest = hashlib.blake2b(f"{org_id}\x00{user_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


class WriterShards:
    """The ingress's view of the Writer shards: the handle of a user's shard, writes split by shard."""

    def __init__(self, handles: Sequence[DeploymentHandle]) -> None:
        if not handles:
            raise ValueError("at least one Writer shard")
        self.handles = list(handles)

    def __len__(self) -> int:
        return len(self.handles)

    def of(self, org_id: str, user_id: str) -> DeploymentHandle:
        """The shard that takes every change of this user."""
        return self.handles[shard_of(org_id, user_id, len(self.handles))]

    @property
    def any(self) -> DeploymentHandle:
        """A shard for what is not a user's (org-wide checks such as the quota's room)."""
        return self.handles[0]

    async def add(self, org_id: str, items: list[NewMemory], idempotency_key: str | None,
                  actor: str) -> dict[str, list[str]]:
        """Write `items` (of one or more users), each part on its users' shard; the ids in request
        order once every part has committed. A part that fails fails the request: its retry under
        the same key rewrites nothing that did commit."""
        parts: dict[int, list[int]] = {}
        for position, item in enumerate(items):
            parts.setdefault(shard_of(org_id, item.user_id, len(self.handles)), []).append(position)
        if len(parts) == 1:
            (shard,) = parts
            return await self.handles[shard].add.remote(org_id, items, idempotency_key, actor)
        shards = sorted(parts)
        results = await asyncio.gather(*(
            self.handles[shard].add.remote(org_id, [items[i] for i in parts[shard]], idempotency_key, actor,
                                           positions=parts[shard])
            for shard in shards
        ), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        ids: list[str] = [""] * len(items)
        created: list[str] = []
        for shard, result in zip(shards, results, strict=True):
            for position, memory_id in zip(parts[shard], result["ids"], strict=True):
                ids[position] = memory_id
            created.extend(result["created"])
        return {"ids": ids, "created": sorted(created)}
