"""The `agent-memory` command line: its commands by area (cli.data, cli.jobs, cli.keys, cli.serve,
cli.evaluate), and its one edge where library errors become CLI errors: `error (code): message`
and exit status 1; usage errors exit 2.

    agent-memory [-v] COMMAND [ARGS]...     # or: python -m cli.main COMMAND [ARGS]...
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from cli import data, evaluate, jobs, keys, serve
from cli.options import Group

HELP = """Long-term memory for LLM agents.

\b
The data commands (add, search, forget, restore, export, import, jobs show) go through the HTTP
API of a running server when --url or AGENT_MEMORY_URL names one, in a second or so; otherwise,
or where --storage-uri is given on the command line, they open the store (--storage-uri,
AGENT_MEMORY_STORAGE_URI) in this process, and add, search and import load the model there. The
others ([store] below) always work on the store directly. Each command's --help says where it
runs. -v, before or after the command, shows the libraries' logs.
"""

# The errors a command may end with: the core's (agent_memory.errors) and the HTTP client's
# (agent_memory_http.errors), each with a stable code.
ERROR_MODULES = ("agent_memory.errors", "agent_memory_http.errors")


@click.group("agent-memory", cls=Group, help=HELP, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def cli() -> None:
    pass


for command in (serve.serve, data.add, data.search, data.forget, data.restore, data.export, data.stats,
                data.import_file, jobs.consolidate, jobs.reembed, jobs.reindex, evaluate.evaluate, serve.mcp,
                jobs.jobs, keys.keys):
    cli.add_command(command)


def library_error(exc: BaseException) -> tuple[str, str] | None:
    """The code and message of an error of the product or of its HTTP client, else None.

    Looked up among the modules already loaded: an error of a module that was never imported
    cannot have been raised, and `--help` or a call over HTTP does not load the core for this.
    """
    for name in ERROR_MODULES:
        module = sys.modules.get(name)
        if module is not None and isinstance(exc, module.AgentMemoryError):
            return exc.code, exc.message  # type: ignore[attr-defined]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `agent-memory` console script; the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # The arguments as given, for `serve`, which runs the server in a child with the same ones.
        return int(cli.main(args, prog_name="agent-memory", standalone_mode=False, obj={"argv": args}) or 0)
    except click.ClickException as exc:  # a usage error (2), a bad parameter, a missing file
        exc.show()
        return exc.exit_code
    except click.Abort:  # Ctrl-C
        return 130
    except Exception as exc:
        found = library_error(exc)
        if found is None:
            raise
        print(f"error ({found[0]}): {found[1]}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
