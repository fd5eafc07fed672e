"""A small OpenAI-compatible chat-completions server on loopback, answering from a script."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: an HTTP status, the assistant's text (or an error body), and a delay."""

    content: str = ""
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def memories_reply(*memories: dict[str, Any], delay_s: float = 0.0) -> Reply:
    """A well-formed answer listing these memories."""
    return Reply(json.dumps({"memories": list(memories)}, ensure_ascii=False), delay_s=delay_s)


class ScriptedLLM:
    """Serves `/v1/chat/completions`; each request takes the next scripted reply and is recorded.

    With the script exhausted, `respond` (when set) answers from the request body instead.
    """

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.respond: Callable[[dict[str, Any]], str] | None = None
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with owner._lock:
                    owner.requests.append({"path": self.path, "body": json.loads(body or b"{}"),
                                           "authorization": self.headers.get("authorization")})
                    if owner.replies:
                        reply = owner.replies.pop(0)
                    elif owner.respond is not None:
                        reply = Reply(owner.respond(json.loads(body or b"{}")))
                    else:
                        reply = Reply(status=500, content="script exhausted")
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.status == 200:
                    payload = {
                        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": "scripted",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": reply.content}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                else:
                    payload = {"error": {"message": reply.content or "error", "type": "scripted", "code": reply.status}}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and went away, as a timeout test wants

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def user_payload(self, index: int = -1) -> dict[str, Any]:
        """The JSON the extractor sent as the user message of one request."""
        messages = self.requests[index]["body"]["messages"]
        return json.loads(next(m["content"] for m in messages if m["role"] == "user"))


@contextmanager
def scripted_llm() -> Iterator[ScriptedLLM]:
    llm = ScriptedLLM()
    llm.thread.start()
    try:
        yield llm
    finally:
        llm.server.shutdown()
        llm.server.server_close()
