"""`agent-memory mcp`: the memory as Model Context Protocol tools (remember, recall, list_memories,
forget), on the official MCP SDK, over stdio or streamable HTTP.

The tools have one implementation over two backends: a running server's HTTP API through the
Python client (writes go through its Writer; its keys decide what a call may do), or, with
`--embedded`, the local store opened in this process. Both answer the client's models.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal, Protocol

from agent_memory_http import AgentMemoryError as ClientError
from agent_memory_http import Context, ContextMemory, Erasure, Memory, MemoryClient
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from agent_memory import __version__
from agent_memory.errors import AgentMemoryError, InvalidInputError
from agent_memory.models import Scope
from agent_memory.service import MemoryService
from cli.net import is_loopback
from storage.connect import open_service

ACTOR = "mcp"  # the actor of embedded writes in the audit trail; over HTTP the server names the key
MCP_PATH = "/mcp"
# Lines for each request and session: the client's calls to the server, the SDK's handling of them.
PER_REQUEST_LOGGERS = ("httpx", "httpcore", "mcp")

INSTRUCTIONS = (
    "Long-term memory of the users you work with, kept across conversations. Call `recall` with what "
    "you are about to answer before you answer, to bring back what you know of the user; call "
    "`remember` when the user states a lasting fact, preference, decision or procedure. Memories may "
    "be written in any language (English and Chinese are both searched well)."
)

MemoryType = Literal["episodic", "semantic", "procedural"]
MetadataValue = str | int | float | bool | None

REMEMBER = (
    "Store one long-term memory of a user and return its id. Use it for what stays true or useful beyond "
    "this conversation: facts, preferences, decisions, procedures (restatements are merged when the "
    "memory is consolidated)."
)
RECALL = (
    "Recall what is known of a user that bears on `query`: a block ready to read, with the memories best "
    "first (their type, the date they were stored and a score in 0..1). Search is by meaning and by "
    "keywords, so a paraphrase finds a memory too; ask in the language the memory was written in."
)
LIST_MEMORIES = "List a user's stored memories, newest first, with their ids (to `forget` one of them)."
FORGET = "Delete one memory of a user by its id (from list_memories or recall)."
FORGET_USER = ("Without memory_id it erases everything of the user (memories, messages, events), "
               "unrecoverably: only do that when the user asks for it.")
FORGET_USER_OFF = ("Erasing a whole user is turned off on this server (started without --allow-erase): "
                   "give memory_id.")

UserId = Annotated[str, Field(
    min_length=1, description="The end user the memories belong to, as your application names them (e.g. 'u42').",
)]


# -- what the tools answer --------------------------------------------------------------------


class Recollection(BaseModel):
    """What `recall` found: the block to read, and the memories in it, best first."""

    text: str = Field(description="The context block: the memories (and, with a session, its recent turns).")
    memories: list[ContextMemory] = Field(description="The recalled memories in the block, best first.")
    degraded: bool = Field(False, description="True when the server searched by keywords alone.")


class StoredMemory(BaseModel):
    """One stored memory, as `list_memories` shows it."""

    id: str
    content: str
    memory_type: str
    importance: float
    created_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class MemoryList(BaseModel):
    """A user's memories, newest first."""

    memories: list[StoredMemory]


class Forgotten(BaseModel):
    """What `forget` removed: one memory, or every row of a user (rows per table, and the purge job)."""

    deleted: str | None = Field(None, description="The id of the deleted memory.")
    erased: dict[str, int] | None = Field(None, description="Rows erased per table, when a whole user was erased.")
    job_id: str | None = Field(None, description="The job that purges the erased user's bytes from the store's files.")


# -- the two backends -------------------------------------------------------------------------


class Memories(Protocol):
    """What the tools need of the memory: a running server's HTTP API, or the local store."""

    where: str

    def add(self, user_id: str, content: str, memory_type: MemoryType | None,
            metadata: dict[str, MetadataValue] | None) -> str: ...

    def context(self, user_id: str, query: str, *, top_k: int | None, session_id: str | None,
                max_tokens: int | None) -> Context: ...

    def list_memories(self, user_id: str, limit: int) -> list[Memory]: ...

    def delete(self, user_id: str, memory_id: str) -> None: ...

    def erase_user(self, user_id: str) -> Erasure: ...

    def close(self) -> None: ...


class RemoteMemories:
    """The memory of a running agent-memory server, through its HTTP API."""

    def __init__(self, client: MemoryClient) -> None:
        self.client = client
        self.where = client.base_url

    def add(self, user_id: str, content: str, memory_type: MemoryType | None,
            metadata: dict[str, MetadataValue] | None) -> str:
        return self.client.add(user_id, content, memory_type=memory_type, metadata=metadata).id

    def context(self, user_id: str, query: str, *, top_k: int | None, session_id: str | None,
                max_tokens: int | None) -> Context:
        return self.client.context(user_id, query, session_id=session_id, max_tokens=max_tokens, top_k=top_k)

    def list_memories(self, user_id: str, limit: int) -> list[Memory]:
        return self.client.list(user_id, limit=limit).memories

    def delete(self, user_id: str, memory_id: str) -> None:
        self.client.delete(user_id, memory_id)

    def erase_user(self, user_id: str) -> Erasure:
        return self.client.erase_user(user_id)

    def close(self) -> None:
        self.client.close()


class EmbeddedMemories:
    """The local store, opened in this process: the same answers as the HTTP API's, for one org."""

    def __init__(self, service: MemoryService, org_id: str) -> None:
        self.service = service
        self.org_id = org_id
        self.where = f"the store at {service.settings.storage.uri} (org {org_id!r})"
        # The tools run on worker threads; the store takes one writer at a time, as behind the server's Writer.
        self._writes = threading.Lock()

    def add(self, user_id: str, content: str, memory_type: MemoryType | None,
            metadata: dict[str, MetadataValue] | None) -> str:
        memory: dict[str, Any] = {"user_id": user_id, "content": content}
        if memory_type is not None:
            memory["memory_type"] = memory_type
        if metadata is not None:
            memory["metadata"] = metadata
        with self._writes:
            return self.service.add(self.org_id, memory, actor=ACTOR)

    def context(self, user_id: str, query: str, *, top_k: int | None, session_id: str | None,
                max_tokens: int | None) -> Context:
        request = {"user_id": user_id, "query": query, "session_id": session_id, "max_tokens": max_tokens,
                   "top_k": top_k}
        return Context.model_validate(self.service.context(self.org_id, request))

    def list_memories(self, user_id: str, limit: int) -> list[Memory]:
        page = self.service.list(Scope.user(self.org_id, user_id), limit=limit)
        return [Memory.model_validate(record.public()) for record in page.records]

    def delete(self, user_id: str, memory_id: str) -> None:
        with self._writes:
            self.service.delete(Scope.user(self.org_id, user_id), memory_id, actor=ACTOR)

    def erase_user(self, user_id: str) -> Erasure:
        with self._writes:
            receipt = self.service.erase_user(self.org_id, user_id, actor=ACTOR)
        return Erasure(erased=receipt["rows_deleted"], job_id=receipt["job_id"])

    def close(self) -> None:
        self.service.close()


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """An error of the server (or of the local store) as a tool error the model reads: its code and message."""
    try:
        yield
    except (ClientError, AgentMemoryError) as exc:
        raise ToolError(f"{exc.code}: {exc.message}") from exc


# -- the tools ----------------------------------------------------------------------------------


def build_server(memories: Memories, *, allow_erase: bool) -> MCPServer:
    """The MCP server with the four memory tools over `memories`; `forget` erases a whole user only
    when `allow_erase`."""
    server: MCPServer = MCPServer("agent-memory", instructions=INSTRUCTIONS, version=__version__)

    @server.tool(description=REMEMBER,
                 annotations=ToolAnnotations(title="Remember", read_only_hint=False, destructive_hint=False))
    def remember(
        user_id: UserId,
        content: Annotated[str, Field(min_length=1, description=(
            "The memory, one self-contained statement, in any language (e.g. 'Prefers Python for backend "
            "work', '退款需要两级审批')."))],
        memory_type: Annotated[MemoryType | None, Field(description=(
            "semantic: a fact or preference (the default); episodic: something that happened; "
            "procedural: how something is done."))] = None,
        metadata: Annotated[dict[str, MetadataValue] | None, Field(description=(
            "Flat key-value tags to keep with the memory (e.g. {\"source\": \"chat\"})."))] = None,
    ) -> str:
        with _tool_errors():
            return memories.add(user_id, content, memory_type, metadata)

    @server.tool(description=RECALL, annotations=ToolAnnotations(title="Recall", read_only_hint=True))
    def recall(
        user_id: UserId,
        query: Annotated[str, Field(min_length=1, description=(
            "What you need to know, in the user's words or your own, in any language "
            "(e.g. 'which language does the user use for the backend?')."))],
        top_k: Annotated[int | None, Field(ge=1, le=200, description=(
            "At most this many memories (default: the server's, 8 unless configured)."))] = None,
        session_id: Annotated[str | None, Field(min_length=1, description=(
            "A conversation logged on the server: its recent turns and a summary of older ones join the block."
        ))] = None,
        max_tokens: Annotated[int | None, Field(ge=32, description=(
            "Keep the block within this many tokens (default: the server's, 1024 unless configured)."))] = None,
    ) -> Annotated[CallToolResult, Recollection]:
        with _tool_errors():
            context = memories.context(user_id, query, top_k=top_k, session_id=session_id, max_tokens=max_tokens)
        found = Recollection(text=context.text, memories=context.parts.memories, degraded=context.degraded)
        text = found.text or f"No memories of user {user_id} bear on this query."
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=found.model_dump(mode="json"))

    @server.tool(description=LIST_MEMORIES,
                 annotations=ToolAnnotations(title="List memories", read_only_hint=True))
    def list_memories(
        user_id: UserId,
        limit: Annotated[int, Field(ge=1, le=1000, description="At most this many, newest first.")] = 50,
    ) -> MemoryList:
        with _tool_errors():
            stored = memories.list_memories(user_id, limit)
        return MemoryList(memories=[StoredMemory.model_validate(m.model_dump()) for m in stored])

    @server.tool(description=f"{FORGET} {FORGET_USER if allow_erase else FORGET_USER_OFF}",
                 annotations=ToolAnnotations(title="Forget", read_only_hint=False, destructive_hint=True,
                                             idempotent_hint=True))
    def forget(
        user_id: UserId,
        memory_id: Annotated[str | None, Field(min_length=1, description=(
            "The memory to delete; leave it out only to erase the whole user."))] = None,
    ) -> Forgotten:
        if memory_id is not None:
            with _tool_errors():
                memories.delete(user_id, memory_id)
            return Forgotten(deleted=memory_id)
        if not allow_erase:
            raise ToolError("erase_disabled: erasing a whole user is turned off on this MCP server; give "
                            "memory_id to delete one memory, or start it with `agent-memory mcp --allow-erase`")
        with _tool_errors():
            erasure = memories.erase_user(user_id)
        return Forgotten(erased=erasure.erased, job_id=erasure.job_id)

    return server


# -- the command --------------------------------------------------------------------------------


def open_memories(*, url: str | None, api_key: str | None, embedded: bool, org_id: str,
                  storage_uri: str | None) -> Memories:
    """The backend the command line names: the local store with --embedded, else the server at --url."""
    if not embedded:
        return RemoteMemories(MemoryClient(url, api_key))
    if url is not None or api_key is not None:
        raise InvalidInputError("--url and --api-key name a running server; --embedded opens the local store instead")
    from cli.options import settings

    # Over stdio, stdout carries the protocol: nothing said while the model loads may land there.
    with contextlib.redirect_stdout(sys.stderr):
        # Recall hits are counted in the background, as the server's replicas count them; closing flushes.
        service = open_service(settings(storage_uri), with_maintenance=True, defer_access=True)
    return EmbeddedMemories(service, org_id)


def run_mcp(*, transport: str, host: str, port: int, allow_erase: bool, verbose: bool, **backend: Any) -> int:
    """Serve the memory tools until stdin closes (stdio) or the process is stopped (HTTP).

    Its output is its own line and uvicorn's (started, stopped); the libraries' lines for each
    request and session (httpx's calls to the server, the MCP SDK's) only with -v.
    """
    if not verbose:
        for name in PER_REQUEST_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    memories = open_memories(**backend)
    try:
        server = build_server(memories, allow_erase=allow_erase)
        if transport == "stdio":
            print(f"agent-memory MCP server on stdio, over {memories.where}", file=sys.stderr, flush=True)
            server.run("stdio")
            return 0
        if not is_loopback(host):
            print(f"warning: the MCP endpoint on {host} has no authentication of its own: whoever reaches it "
                  "acts with this server's key, or on the local store", file=sys.stderr)
        print(f"agent-memory MCP server at http://{host}:{port}{MCP_PATH}, over {memories.where}",
              file=sys.stderr, flush=True)
        # Uvicorn stops in order on SIGTERM, then raises it again: as an interrupt, as Ctrl-C is, so the
        # backend is closed too.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        server.run("streamable-http", host=host, port=port, streamable_http_path=MCP_PATH)
        return 0
    finally:
        memories.close()
