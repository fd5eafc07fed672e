"""What the commands share: `-v` on every command, the libraries kept quiet without it, the options
that name a store, a Ray cluster or a server, and the choice between the store and a server.

Nothing here imports the product: `agent-memory --help` and a command that only talks HTTP load
neither the store, Ray nor the model.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from cli.output import quiet_libraries

if TYPE_CHECKING:
    from agent_memory_http import MemoryClient

    from agent_memory.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])

VERBOSE = "agent_memory.verbose"
VERBOSE_HELP = "Show the logs, warnings and loading bars of the libraries (Ray, Lance, the model)."
# Where each command does its work: at the end of its help, and a tag in the list of commands.
STORE = "Runs on the store in this process."
ON_STORE = "[store]"
ON_EITHER = "[store or --url]"
STORE_OR_SERVER = ("Runs through the HTTP API of the server --url names (or AGENT_MEMORY_URL), else on the "
                   "store in this process.")


def _verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[VERBOSE] = True  # one dictionary for the group's context and its commands'
        # The model's loading bar and log lines, which the embedder keeps off otherwise, for this
        # command only (a command run in process, as CliRunner runs it, leaves the environment as it was).
        if "TRANSFORMERS_VERBOSITY" not in os.environ:
            os.environ["TRANSFORMERS_VERBOSITY"] = "info"
            ctx.call_on_close(lambda: os.environ.pop("TRANSFORMERS_VERBOSITY", None))


def _verbose_option() -> click.Option:
    return click.Option(["-v", "--verbose"], is_flag=True, expose_value=False, is_eager=True, callback=_verbose,
                        help=VERBOSE_HELP)


class Command(click.Command):
    """A command with `-v`, whose libraries stay quiet without it. A `server`'s log lines (uvicorn's
    start and stop) are its output, and its standard error is left as it is."""

    def __init__(self, *args: Any, server: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(_verbose_option())
        self.server = server

    def invoke(self, ctx: click.Context) -> Any:
        if ctx.meta.get(VERBOSE):
            status = super().invoke(ctx)
        else:
            with quiet_libraries(logs=self.server):
                status = super().invoke(ctx)
        if status:
            ctx.exit(status)  # a handler's exit status, however the command was called
        return status


def command(name: str, **attrs: Any) -> Callable[[Callable[..., Any]], Command]:
    """`click.command` for a command of this CLI (with `-v`, its libraries quiet)."""
    return click.command(name, cls=Command, **attrs)


class Group(click.Group):
    """A group whose commands (and subgroups) take `-v` too: before the command or after it."""

    command_class = Command
    group_class = type  # subgroups of this same class

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(_verbose_option())

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # as added: by area, not alphabetically


# -- the options that name where the work is done ----------------------------------------------------


def org_option(help: str = "The org (tenant)", default: str | None = "default", hidden: bool = False) -> Callable[[F], F]:
    return click.option("--org-id", default=default, metavar="ORG", hidden=hidden,
                        help=f"{help} (default: {default})." if default else f"{help}.")


def storage_option(f: F) -> F:
    return click.option("--storage-uri", envvar="AGENT_MEMORY_STORAGE_URI", show_envvar=True, metavar="URI",
                        help="The store: a directory or s3://bucket/path (default: ./data/lancedb).")(f)


def address_option(hidden: bool = False) -> Callable[[F], F]:
    """`--address`: a command that runs Ray joins that cluster; one given none starts a Ray of its own
    and never joins a cluster it was not told about. Hidden where a command runs no Ray."""
    return click.option("--address", envvar="RAY_ADDRESS", show_envvar=True, metavar="HOST:PORT", hidden=hidden,
                        help="The Ray cluster to join (`auto`: the one `ray start` last started here); "
                             "default: a Ray of this command's own.")


def server_options(f: F) -> F:
    f = click.option("--api-key", envvar="AGENT_MEMORY_API_KEY", show_envvar=True, metavar="KEY",
                     help="The server's API key.")(f)
    return click.option("--url", envvar="AGENT_MEMORY_URL", show_envvar=True, metavar="URL",
                        help="An agent-memory server: the command goes through its HTTP API.")(f)


def store_options(*, ray: bool = False, org: bool = True) -> Callable[[F], F]:
    """The options of a command on the store: --org-id, --storage-uri, and --address (hidden
    unless the command runs Ray: every data command has always accepted it)."""

    def decorate(f: F) -> F:
        f = address_option(hidden=not ray)(storage_option(f))
        return org_option()(f) if org else f

    return decorate


def settings(storage_uri: str | None) -> Settings:
    """The settings from the environment (and `.env`), the store as --storage-uri names it."""
    from agent_memory.settings import Settings

    return Settings(**({"storage_uri": storage_uri} if storage_uri else {}))


def given(ctx: click.Context, name: str) -> bool:
    """Whether the command line itself gave this option (not a default, not the environment)."""
    return ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def server_url(ctx: click.Context, store_only: Iterable[str] = ()) -> str | None:
    """The server a data command goes through, or None for the store in this process.

    `--url` (or AGENT_MEMORY_URL) names the server. `--storage-uri` given on the command line names
    the store instead, even where AGENT_MEMORY_URL is set; both on the command line is a usage error,
    as are options that only the store has (`store_only`) beside a server.
    """
    url, params = ctx.params.get("url"), ctx.params
    if not url:
        if given(ctx, "api_key"):
            raise click.UsageError("--api-key is the key of a server: give its --url too")
        return None
    if given(ctx, "storage_uri"):
        if given(ctx, "url"):
            raise click.UsageError("--url sends the command to a server and --storage-uri opens a store here: "
                                   "give one of them")
        return None
    refused = [flag(name) for name in ("org_id", "address", *store_only) if name in params and given(ctx, name)]
    if refused:
        org = " (the server's API key names the org)" if "--org-id" in refused else ""
        raise click.UsageError(f"{', '.join(refused)}: only on the store in this process, not through a server "
                               f"(--url, AGENT_MEMORY_URL){org}")
    return url


def client(ctx: click.Context, url: str) -> MemoryClient:
    """The HTTP client of the server at `url`, with --api-key (or AGENT_MEMORY_API_KEY), closed with the command."""
    from agent_memory_http import MemoryClient

    return ctx.with_resource(MemoryClient(url, ctx.params.get("api_key")))
