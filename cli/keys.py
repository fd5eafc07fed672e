"""`agent-memory keys`: API keys in the keys file a server re-reads (create, list, revoke)."""

from __future__ import annotations

import sys
from typing import Any

import click

from cli.options import Group, settings
from cli.output import print_json

# serve_app.auth.ROLES, written out so that `--help` loads no part of the server (a test keeps them equal).
ROLES = ("reader", "writer", "admin")
WHERE = "Edits the keys file in this process; a running server takes the change within a second or two."


def _keys_options(f: Any) -> Any:
    f = click.option("--json", "as_json", is_flag=True, help="Print JSON.")(f)
    return click.option("--keys-file", default=None, metavar="PATH",
                        help="Default: AGENT_MEMORY_API_KEYS_FILE (created if missing).")(f)


def _keys_file(path: str | None) -> Any:
    """The keys file a `keys` command edits: --keys-file, else AGENT_MEMORY_API_KEYS_FILE."""
    from agent_memory.errors import InvalidInputError
    from serve_app.auth import KeysFile

    path = path or settings(None).auth.api_keys_file
    if path is None:
        raise InvalidInputError("no keys file: pass --keys-file or set AGENT_MEMORY_API_KEYS_FILE")
    return KeysFile(path)


@click.group("keys", cls=Group, short_help="API keys: create, list and revoke them. [keys file]", epilog=WHERE)
def keys() -> None:
    """API keys: create, list and revoke them (a running server re-reads the file)."""


@keys.command("create", short_help="Issue a random key; it is printed once, only its hash is stored.", epilog=WHERE)
@click.option("--org", "--org-id", "org", required=True, metavar="ORG", help="The org (tenant) the key belongs to.")
@click.option("--role", required=True, type=click.Choice(ROLES),
              help="reader, writer or admin (each includes the ones before).")
@click.option("--name", default=None, help="Unique in the file; the actor in audit events (default: ORG-ROLE-<id>).")
@click.option("--team", multiple=True, metavar="TEAM",
              help="Keep the key's team searches and team-tagged writes to this team (repeatable); default: any "
                   "team of the org.")
@click.option("--rate-limit", type=int, default=None, metavar="PER_MINUTE",
              help="This key's requests a minute across the cluster, in place of AGENT_MEMORY_RATE_LIMIT_PER_MINUTE "
                   "(0: none).")
@_keys_options
def create(org: str, role: str, name: str | None, team: tuple[str, ...], rate_limit: int | None,
           keys_file: str | None, as_json: bool) -> int:
    """Issue a random key for an org and role: the key is printed once, only its hash is stored."""
    from serve_app.auth import ID_CHARS

    file = _keys_file(keys_file)
    issued = file.issue(org_id=org, role=role, name=name, teams=team, rate_limit=rate_limit)
    entry = issued.entry
    if as_json:
        print_json({"key": issued.secret, "id": entry["key_sha256"][:ID_CHARS], "keys_file": str(file.path),
                    **{k: v for k, v in entry.items() if k != "key_sha256"}})
        return 0
    print(issued.secret)
    teams = f", teams {', '.join(entry['teams'])}" if entry.get("teams") else ""
    print(f"key {entry['name']!r} ({entry['key_sha256'][:ID_CHARS]}) for org {entry['org_id']!r}, role {entry['role']}"
          f"{teams}, added to {file.path}. It is shown only now: store it safely. A running server takes it within "
          "a second or two.", file=sys.stderr)
    return 0


@keys.command("list", short_help="The keys in the file (never a key or its whole hash).", epilog=WHERE)
@_keys_options
def list_keys(keys_file: str | None, as_json: bool) -> int:
    """The keys of the file: names, orgs, roles, teams, ids; never a key or its whole hash."""
    file = _keys_file(keys_file)
    listing = file.listing()
    if as_json:
        print_json(listing)
        return 0
    if not listing:
        print(f"no keys in {file.path}")
        return 0
    rows = [("ID", "NAME", "ORG", "ROLE", "TEAMS", "RATE/MIN", "CREATED")] + [
        (k["id"], str(k["name"] or ""), str(k["org_id"]), k["role"], ",".join(k["teams"]) if k["teams"] is not None else "*",
         "" if k["rate_limit_per_minute"] is None else str(k["rate_limit_per_minute"]), k["created_at"] or "")
        for k in listing
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


@keys.command("revoke", short_help="Remove a key by its name or id.", epilog=WHERE)
@click.argument("name_or_id")
@_keys_options
def revoke(name_or_id: str, keys_file: str | None, as_json: bool) -> int:
    """Remove a key by its name, or its id (at least 6 characters) from `keys list`."""
    file = _keys_file(keys_file)
    gone = file.revoke(name_or_id)
    if as_json:
        print_json(gone)
    else:
        print(f"revoked key {gone['name']!r} ({gone['id']}) of org {gone['org_id']!r} in {file.path}")
    return 0
