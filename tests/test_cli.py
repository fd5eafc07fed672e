"""The command line through click's `CliRunner`, in this process: parsing, help, usage and library
errors, `keys`, and the data commands that need no model on a temporary store. Neither Ray nor the
model is started; commands that load them run as subprocesses in tests/test_cli_output.py."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cli import keys as keys_commands
from cli.main import cli, main
from serve_app.auth import ROLES
from storage import LanceStore


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A new, empty store with its tables, as the bundled model's first write leaves it (no model here)."""
    uri = str(tmp_path / "db")
    LanceStore(uri, embedding_model="all-MiniLM-L6-v2", embedding_dim=384, chinese_gloss=True)
    return uri


def _run(*argv: str, env: dict[str, str | None] | None = None, input: str | None = None) -> click.testing.Result:
    # Neither a server nor a store from the machine's environment: each test names its own.
    quiet = {"AGENT_MEMORY_URL": None, "AGENT_MEMORY_API_KEY": None, "AGENT_MEMORY_STORAGE_URI": None,
             "RAY_ADDRESS": None}
    return CliRunner().invoke(cli, list(argv), env={**quiet, **(env or {})}, input=input, catch_exceptions=False)


def _commands(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found = []
    for name, command in group.commands.items():
        found.append(((*prefix, name), command))
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
    return found


# -- parsing and help ---------------------------------------------------------------------------


def test_every_command_says_in_one_line_what_it_does_and_where_it_runs() -> None:
    listing = _run("--help").output
    for path, command in _commands():
        short = command.get_short_help_str(limit=200)
        assert short and "\n" not in short, path
        if len(path) == 1:
            assert f"  {path[0]}" in listing and short in listing, path
            assert short.endswith("]"), f"{path}: no [where it runs] tag"
        done = _run(*path, "--help")
        assert done.exit_code == 0 and f"Usage: agent-memory {' '.join(path)}" in done.output, path
        if not isinstance(command, click.Group):
            assert "-v, --verbose" in done.output, path


def test_verbose_goes_before_or_after_the_command(tmp_path: Path) -> None:
    keys_file = str(tmp_path / "keys.json")
    for argv in (["-v", "keys", "list", "--keys-file", keys_file], ["keys", "-v", "list", "--keys-file", keys_file],
                 ["keys", "list", "--keys-file", keys_file, "-v"], ["keys", "list", "--keys-file", keys_file]):
        done = _run(*argv)
        assert done.exit_code == 0 and "no keys in" in done.output, argv


def test_usage_errors_exit_2_and_say_what_is_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "--user-id", "alice"]) == 2
    assert "Missing argument 'QUERY'" in capsys.readouterr().err
    assert main(["frobnicate"]) == 2
    assert "No such command 'frobnicate'" in capsys.readouterr().err
    assert main(["add", "--user-id", "u", "--type", "opinion", "x"]) == 2
    assert "'opinion' is not one of" in capsys.readouterr().err
    assert main(["--help"]) == 0 and "Long-term memory for LLM agents" in capsys.readouterr().out


@pytest.mark.store  # a LanceDB on a temporary directory
def test_library_errors_are_code_and_message_and_exit_1(tmp_path: Path, store: str, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_MEMORY_URL", raising=False)
    keys_file = tmp_path / "keys.json"
    assert main(["keys", "revoke", "--keys-file", str(keys_file), "nobody"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error (not_found): no key named 'nobody'") and err.count("\n") == 1
    # The store's own errors, from a command that opens it (no model: a delete).
    assert main(["forget", "--user-id", "alice", "--memory-id", "m1", "--storage-uri", store]) == 1
    assert capsys.readouterr().err.startswith("error (not_found): ")


def test_the_roles_are_the_servers() -> None:
    assert keys_commands.ROLES == tuple(ROLES)


# -- keys ---------------------------------------------------------------------------------------


def test_keys_create_list_and_revoke(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.json"
    made = _run("keys", "create", "--org", "acme", "--role", "writer", "--name", "bot", "--team", "support",
                "--keys-file", str(keys_file), "--json")
    assert made.exit_code == 0, made.output
    issued = json.loads(made.stdout)
    assert issued["key"].startswith("am_") and issued["teams"] == ["support"]
    assert issued["key"] not in keys_file.read_text()

    plain = _run("keys", "create", "--org-id", "acme", "--role", "reader", "--keys-file", str(keys_file))
    assert plain.exit_code == 0 and plain.stdout.strip().startswith("am_") and "shown only now" in plain.stderr

    agent = _run("keys", "create", "--org", "acme", "--role", "writer", "--name", "planner", "--agent", "planner-bot",
                 "--keys-file", str(keys_file), "--json")
    assert agent.exit_code == 0 and json.loads(agent.stdout)["agent_id"] == "planner-bot"
    assert _run("keys", "revoke", "planner", "--keys-file", str(keys_file)).exit_code == 0

    listed = _run("keys", "list", "--keys-file", str(keys_file))
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["ID", "NAME", "ORG", "ROLE", "TEAMS", "AGENT", "RATE/MIN", "CREATED"] and len(rows) == 2
    assert issued["key"] not in listed.stdout

    gone = _run("keys", "revoke", "bot", "--keys-file", str(keys_file))
    assert gone.exit_code == 0 and "revoked key 'bot'" in gone.stdout
    assert [k["role"] for k in json.loads(_run("keys", "list", "--keys-file", str(keys_file), "--json").stdout)] == [
        "reader"]


def test_keys_without_a_file_say_how_to_name_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("AGENT_MEMORY_API_KEYS_FILE", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here either
    assert main(["keys", "list"]) == 1
    assert "error (invalid_input): no keys file: pass --keys-file" in capsys.readouterr().err
    monkeypatch.setenv("AGENT_MEMORY_API_KEYS_FILE", str(tmp_path / "from-env.json"))
    assert _run("keys", "create", "--org", "acme", "--role", "admin",
                env={"AGENT_MEMORY_API_KEYS_FILE": str(tmp_path / "from-env.json")}).exit_code == 0
    assert (tmp_path / "from-env.json").exists()


# -- where a data command runs --------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "says"), [
    (["add", "--user-id", "u", "x", "--url", "http://127.0.0.1:9", "--storage-uri", "/tmp/x"], "give one of them"),
    (["add", "--user-id", "u", "x", "--url", "http://127.0.0.1:9", "--org-id", "acme"], "API key names the org"),
    (["import", "h.jsonl", "--url", "http://127.0.0.1:9", "--dry-run", "--engine", "ray"], "--dry-run, --engine"),
    (["import", "h.jsonl", "--url", "http://127.0.0.1:9", "--format", "memories"], "--format memories"),
    (["search", "--user-id", "u", "q", "--api-key", "k", "--storage-uri", "/tmp/x"], "give its --url too"),
])
def test_a_server_and_a_store_are_not_mixed(argv: list[str], says: str) -> None:
    done = _run(*argv)
    assert done.exit_code == 2 and says in done.output, done.output


@pytest.mark.store  # a LanceDB on a temporary directory
def test_the_store_named_on_the_command_line_wins_over_a_server_in_the_environment(store: str) -> None:
    """AGENT_MEMORY_URL names a server nobody runs: --storage-uri keeps the command on the store."""
    done = _run("export", "--user-id", "alice", "--storage-uri", store, env={"AGENT_MEMORY_URL": "http://127.0.0.1:9"})
    assert done.exit_code == 0, done.output
    kinds = [json.loads(line)["kind"] for line in done.stdout.splitlines()]
    assert kinds[0] == "export" and kinds[-1] == "end"


def test_an_unreachable_server_is_an_error_of_its_own(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_MEMORY_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    assert main(["jobs", "show", "j1"]) == 1
    assert capsys.readouterr().err.startswith("error (unreachable): ")


# -- data commands on a temporary store, no model --------------------------------------------------


@pytest.mark.store  # a LanceDB on a temporary directory
def test_stats_export_and_forget_on_an_empty_store(tmp_path: Path, store: str) -> None:
    stats = _run("stats", "--storage-uri", store)
    assert stats.exit_code == 0 and json.loads(stats.stdout)["memories"]["total"] == 0
    assert json.loads(stats.stdout)["chinese_gloss"] == json.loads(stats.stdout)["chinese_gloss_configured"] == "on"
    off = json.loads(_run("stats", "--storage-uri", store, env={"AGENT_MEMORY_EMBEDDING_GLOSS_CHINESE": "off"}).stdout)
    assert (off["chinese_gloss"], off["chinese_gloss_configured"]) == ("on", "off")
    out = tmp_path / "alice.jsonl"
    exported = _run("export", "--user-id", "alice", "--out", str(out), "--storage-uri", store)
    assert exported.exit_code == 0 and "exported 0 rows of user 'alice'" in exported.stderr
    assert json.loads(out.read_text().splitlines()[0])["user_id"] == "alice"
    refused = _run("forget", "--user-id", "alice", "--storage-uri", store, input="n\n")
    assert refused.exit_code == 2 and "needs --yes" in refused.stderr  # not a terminal: no question asked


def test_free_ports_for_one_node_are_distinct_and_outside_ray_s_worker_range() -> None:
    # Chosen one at a time, a port given back can come again at once: two components of one Ray
    # node on the same port stopped a node of `cli.local_cluster` from starting.
    from cli.net import RAY_WORKER_PORTS, free_ports

    taken = free_ports(1)
    ports = free_ports(200, exclude=taken)
    assert len(set(ports)) == 200
    assert not set(ports) & set(taken) and not any(port in RAY_WORKER_PORTS for port in ports)
