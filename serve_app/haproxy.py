"""HAProxy as agent-memory runs it: Ray Serve's own config, with three lines changed.

Serve writes HAProxy's config from a template whose stats page and Prometheus exporter listen on
every interface, and whose answer for a path no application serves (while the application is
being deployed, or after it was deleted) is a plain-text 404. A local stack started by
`agent-memory serve` runs HAProxy through a launcher (`write_launcher`, named to Serve by
RAY_SERVE_HAPROXY_BINARY_PATH) that runs this file: it writes the config Serve made with

- the stats page and the exporter bound to `--monitor-host` (127.0.0.1 unless configured), and
- that answer turned into 503 with a JSON reason, so a health check polled during start-up reads
  "not ready", never "no such route"; likewise the same 404 from Serve's own proxy (HAProxy's
  fallback server) while it has not yet learnt the application's route,

then runs the real binary on it. Standard library only: it runs as a script, once per HAProxy
start or reload, outside any package.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
import tempfile
from pathlib import Path

# Where the monitoring endpoints answer, on their ports.
STATS_PATH = "/stats"
METRICS_PATH = "/metrics"
# Every interface: the monitoring endpoints' binds are then left as Serve writes them.
ALL_INTERFACES = ("", "*", "0.0.0.0", "::")
NOT_SERVING = {"error": {
    "code": "unavailable",
    "message": "agent-memory is not serving yet (it is starting, or stopping): retry shortly",
}}


class LayoutChanged(ValueError):
    """Serve's HAProxy config does not have the lines this file changes (another Ray release)."""


def _section(text: str, header: str) -> tuple[int, int]:
    """The span of the config section that starts with the line `header` (to the next section)."""
    found = re.search(rf"^{re.escape(header)}\s*$", text, re.MULTILINE)
    if found is None:
        raise LayoutChanged(f"no section {header!r} in Serve's HAProxy config")
    following = re.compile(r"^\S", re.MULTILINE).search(text, found.end())
    return found.end(), following.start() if following else len(text)


def _replace_in(text: str, header: str, pattern: str, replacement: str) -> str:
    start, end = _section(text, header)
    body, count = re.subn(pattern, replacement, text[start:end], count=1, flags=re.MULTILINE)
    if count != 1:
        raise LayoutChanged(f"section {header!r} of Serve's HAProxy config has no line like {pattern!r}")
    return text[:start] + body + text[end:]


def served_config(text: str, *, monitor_host: str) -> str:
    """Serve's HAProxy config with the monitoring endpoints on `monitor_host` and the answer for a
    path no application serves made 503 with a JSON reason. LayoutChanged if a line is missing."""
    if monitor_host not in ALL_INTERFACES:
        address = f"[{monitor_host}]" if ":" in monitor_host else monitor_host
        for header in ("frontend prometheus", "listen stats"):
            text = _replace_in(text, header, r"^([ \t]*bind[ \t]+)\S*:(\d+)[ \t]*$", rf"\g<1>{address}:\g<2>")
    body = json.dumps(NOT_SERVING).replace("\\", "\\\\").replace('"', '\\"')
    answer = f'return status 503 content-type application/json string "{body}" hdr Retry-After 2'
    text = _replace_in(text, "backend default_backend", r"^([ \t]*)http-request return status 404 .*$",
                       rf"\g<1>http-request {answer}")
    # Serve's own proxy, HAProxy's fallback server, may be asked before it has learnt the new
    # application's route, and answers that plain-text 404 itself; the application's own 404s are JSON.
    return _replace_in(text, "frontend http_frontend", r"^([ \t]*)(bind[ \t].*)$",
                       rf"\g<1>\g<2>\n\g<1>http-response {answer} if {{ status 404 }} "
                       r"{ res.hdr(content-type) -m beg text/plain }")


def run(binary: str, monitor_host: str, args: list[str]) -> None:
    """Run HAProxy (`binary`) with `args`, its `-f` config replaced by the served one."""
    args = list(args)
    if "-f" not in args or args.index("-f") + 1 >= len(args):
        raise SystemExit(f"agent-memory's HAProxy launcher: no `-f CONFIG` among {args}")
    at = args.index("-f") + 1
    source = Path(args[at])
    served = source.with_name(source.name + ".served")
    staged = served.with_name(f".{served.name}.{os.getpid()}")
    try:
        staged.write_text(served_config(source.read_text(), monitor_host=monitor_host))
    except LayoutChanged as exc:
        raise SystemExit(f"agent-memory's HAProxy launcher: {exc}; set RAY_SERVE_ENABLE_HA_PROXY=0 to serve "
                         "through Serve's own proxy") from None
    os.replace(staged, served)  # a reload racing this start reads one whole file or the other
    args[at] = str(served)
    os.execv(binary, [binary, *args])


LAUNCHER_MARK = "# HAProxy for agent-memory"
RUNS = "# runs: "


def launched_binary(path: str) -> str | None:
    """The HAProxy binary a launcher `write_launcher` made runs, or None if `path` is no launcher."""
    try:
        with open(path, "rb") as file:
            head = file.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    if LAUNCHER_MARK not in head:
        return None
    line = next((line for line in head.splitlines() if line.startswith(RUNS)), None)
    return shlex.split(line.removeprefix(RUNS))[0] if line else None


def write_launcher(binary: str, monitor_host: str, directory: Path | None = None) -> Path:
    """An executable that runs `binary` through this file (what RAY_SERVE_HAPROXY_BINARY_PATH
    names): kept in a private temporary directory, one file per binary and host. A launcher given
    as `binary` is not wrapped again: the binary it runs is."""
    binary = launched_binary(binary) or binary
    script = (
        "#!/bin/sh\n"
        f"{LAUNCHER_MARK}: Serve's config with its monitoring on {monitor_host or 'every interface'} "
        "(serve_app/haproxy.py).\n"
        f"{RUNS}{shlex.quote(binary)}\n"
        f"exec {shlex.quote(sys.executable)} -I {shlex.quote(str(Path(__file__).resolve()))} "
        f"{shlex.quote(binary)} {shlex.quote(monitor_host)} \"$@\"\n"
    )
    directory = directory or Path(tempfile.gettempdir()) / f"agent-memory-{os.getuid()}"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"haproxy-{hashlib.sha256(script.encode()).hexdigest()[:16]}"
    if not path.exists() or path.read_text() != script:
        staged = path.with_name(f".{path.name}.{os.getpid()}")
        staged.write_text(script)
        staged.chmod(0o700)
        os.replace(staged, path)
    return path


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], sys.argv[3:])
