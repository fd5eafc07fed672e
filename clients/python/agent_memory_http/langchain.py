"""A LangChain retriever over agent-memory's recall.

Install it from a checkout of the repository, with the client alone
(`pip install './clients/python[langchain]'`) or with the server (`pip install -e '.[langchain]'`):

    from agent_memory_http import MemoryClient
    from agent_memory_http.langchain import AgentMemoryRetriever

    retriever = AgentMemoryRetriever(client=MemoryClient(), user_id="u1", top_k=5)
    docs = retriever.invoke("Which language should I use for the API?")

Only this module imports `langchain_core`; the rest of the client works without it.
"""

from __future__ import annotations

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from .async_client import AsyncMemoryClient
from .client import MemoryClient
from .models import MemoryType, SearchHit, SearchResult


class AgentMemoryRetriever(BaseRetriever):
    """One user's memories that answer the query, best first, as LangChain `Document`s.

    `client` serves `invoke`; `ainvoke` awaits `async_client` when one is given, and otherwise
    runs `client` in a thread. Each document's `page_content` is the memory's text; its metadata
    holds `id`, `memory_type`, `score` (0..1), `created_at` (ISO 8601), `source_ids` and the
    memory's own `metadata`. The retriever does not close the clients it was given.
    """

    client: MemoryClient
    async_client: AsyncMemoryClient | None = None
    user_id: str
    top_k: int = 5
    memory_types: list[MemoryType] | None = None
    min_score: float | None = None

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        result = self.client.search(self.user_id, query, top_k=self.top_k, memory_types=self.memory_types,
                                    min_score=self.min_score)
        return _documents(result)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.async_client is None:
            return await super()._aget_relevant_documents(query, run_manager=run_manager)
        result = await self.async_client.search(self.user_id, query, top_k=self.top_k,
                                                memory_types=self.memory_types, min_score=self.min_score)
        return _documents(result)


def _documents(result: SearchResult) -> list[Document]:
    return [_document(hit) for hit in result.memories]


def _document(hit: SearchHit) -> Document:
    return Document(page_content=hit.content, id=hit.id, metadata={
        "id": hit.id,
        "memory_type": hit.memory_type,
        "score": hit.score,
        "created_at": hit.created_at.isoformat() if hit.created_at else None,
        "source_ids": list(hit.source_ids),
        "metadata": dict(hit.metadata),
    })
