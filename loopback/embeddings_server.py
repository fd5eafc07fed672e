"""A small OpenAI-compatible embeddings server for tests, on loopback (stdlib only).

Vectors are deterministic bags of hashed words, so similar texts get similar vectors. Setting
`fail_with` makes every call answer that HTTP status, to exercise outages; `delay_s` makes it
slow, as an overloaded endpoint is; clearing `answering` holds every call until it is set again.
`batches` records how many texts each call carried.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

DIM = 64


def vector(text: str) -> list[float]:
    """A unit vector from the hashed words of `text`."""
    v = np.zeros(DIM, dtype=np.float32)
    for word in text.lower().split():
        v[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    norm = float(np.linalg.norm(v)) or 1.0
    return (v / norm).tolist()


class EmbeddingsServer:
    """Serves POST /v1/embeddings until `close()`."""

    def __init__(self) -> None:
        self.fail_with: int | None = None
        self.delay_s = 0.0
        self.answering = threading.Event()
        self.answering.set()
        self.calls = 0
        self.batches: list[int] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                server.calls += 1
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                server.batches.append(len(body["input"]) if isinstance(body["input"], list) else 1)
                server.answering.wait(timeout=600)
                time.sleep(server.delay_s)
                if server.fail_with is not None:
                    payload = json.dumps({"error": {"message": "unavailable", "type": "server_error"}}).encode()
                    self.send_response(server.fail_with)
                else:
                    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                    payload = json.dumps({
                        "object": "list", "model": body["model"],
                        "data": [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(inputs)],
                        "usage": {"prompt_tokens": 0, "total_tokens": 0},
                    }).encode()
                    self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
