"""API keys without a server: `agent-memory keys` on real files, the hashes it stores, and how a
replica's KeyRing follows the file (edits, a Kubernetes Secret's link swap, a broken file)."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from agent_memory.errors import ConflictError, InvalidInputError, PermissionDeniedError
from cli.main import main
from serve_app.auth import KEY_PREFIX, ApiKeys, KeyRing, KeysFile, UnauthorizedError, key_digest


class Clock:
    """Monotonic seconds that tests move."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _create(capsys: pytest.CaptureFixture[str], keys_file: Path, *argv: str) -> dict:
    assert main(["keys", "create", "--keys-file", str(keys_file), "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_create_prints_the_key_once_and_stores_only_its_hash(tmp_path: Path, capsys) -> None:
    keys_file = tmp_path / "new-dir" / "keys.json"  # neither the file nor its directory exists yet
    assert main(["keys", "create", "--keys-file", str(keys_file), "--org", "acme", "--role", "writer",
                 "--name", "support-bot"]) == 0
    out, err = capsys.readouterr()
    secret = out.strip()
    assert secret.startswith(KEY_PREFIX) and len(secret) >= 40 and "shown only now" in err
    text = keys_file.read_text()
    assert secret not in text and secret[len(KEY_PREFIX):] not in text
    (entry,) = json.loads(text)["keys"]
    assert entry["key_sha256"] == key_digest(secret)
    assert {k: entry[k] for k in ("org_id", "role", "name")} == {"org_id": "acme", "role": "writer", "name": "support-bot"}
    assert entry["created_at"].endswith("+00:00") and "key" not in entry
    assert stat.S_IMODE(keys_file.stat().st_mode) == 0o600
    # What a server reads of the file: the printed key is the key's principal.
    caller = ApiKeys.read(keys_file).authenticate(f"Bearer {secret}")
    assert (caller.org_id, caller.role, caller.key_id, caller.teams) == ("acme", "writer", "support-bot", None)
    # Only the file itself is left behind: the temporary file was renamed over it.
    assert sorted(p.name for p in keys_file.parent.iterdir()) == ["keys.json"]


def test_json_output_teams_rate_limit_and_unique_names(tmp_path: Path, capsys) -> None:
    keys_file = tmp_path / "keys.json"
    made = _create(capsys, keys_file, "--org", "acme", "--role", "reader", "--team", "support", "--team", "sales",
                   "--rate-limit", "30")
    assert made["key"].startswith(KEY_PREFIX) and made["keys_file"] == str(keys_file.resolve())
    assert made["teams"] == ["sales", "support"] and made["rate_limit_per_minute"] == 30
    assert made["name"].startswith("acme-reader-") and made["id"] == key_digest(made["key"])[:12]
    caller = ApiKeys.read(keys_file).authenticate(f"Bearer {made['key']}")
    assert caller.teams == frozenset({"sales", "support"}) and caller.rate_limit == 30

    assert main(["keys", "create", "--keys-file", str(keys_file), "--org", "acme", "--role", "admin",
                 "--name", made["name"]]) == 1
    assert "names are unique" in capsys.readouterr().err
    assert len(json.loads(keys_file.read_text())["keys"]) == 1
    assert main(["keys", "create", "--keys-file", str(keys_file), "--org", "acme", "--role", "reader",
                 "--rate-limit", "-1"]) == 1
    assert "rate limit" in capsys.readouterr().err


def test_a_key_of_an_agent_writes_as_that_agent_and_reaches_no_other_agents_work(tmp_path: Path, capsys) -> None:
    keys_file = tmp_path / "keys.json"
    made = _create(capsys, keys_file, "--org", "acme", "--role", "admin", "--name", "planner", "--agent", "planner-bot")
    caller = ApiKeys.read(keys_file).authenticate(f"Bearer {made['key']}")
    assert caller.agent_id == "planner-bot" and made["agent_id"] == "planner-bot"
    assert caller.writes_as(None) == caller.writes_as("planner-bot") == "planner-bot"
    with pytest.raises(PermissionDeniedError) as other:
        caller.writes_as("support-bot")
    assert other.value.code == "agent_forbidden"
    with pytest.raises(PermissionDeniedError) as erasing:
        caller.require_every_agent("erasing a user")
    assert erasing.value.code == "agent_forbidden" and "org-level key" in erasing.value.message
    org_level = ApiKeys([{"key": "k", "org_id": "acme", "role": "admin"}]).authenticate("Bearer k")
    assert org_level.writes_as("support-bot") == "support-bot" and org_level.writes_as(None) is None
    org_level.require_every_agent("erasing a user")
    for bad in ("", " ", "a\x00b", 7):
        with pytest.raises(InvalidInputError, match="agent_id"):
            ApiKeys([{"key": "k", "org_id": "acme", "role": "admin", "agent_id": bad}])


def test_list_shows_no_secret_and_revoke_by_name_or_id(tmp_path: Path, capsys) -> None:
    keys_file = tmp_path / "keys.json"
    # A hand-written entry with the key itself, as older files have: listed and kept as it was.
    keys_file.write_text(json.dumps({"keys": [{"key": "s3cr3t-by-hand", "org_id": "globex", "role": "reader",
                                               "name": "by-hand"}]}))
    first = _create(capsys, keys_file, "--org", "acme", "--role", "writer", "--name", "one")
    second = _create(capsys, keys_file, "--org", "acme", "--role", "admin", "--name", "two", "--team", "ops")

    assert main(["keys", "list", "--keys-file", str(keys_file)]) == 0
    table = capsys.readouterr().out
    assert all(name in table for name in ("by-hand", "one", "two", "ops", first["id"], second["id"]))
    for secret in (first["key"], second["key"], "s3cr3t-by-hand", key_digest(first["key"])):
        assert secret not in table
    assert main(["keys", "list", "--keys-file", str(keys_file), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [k["name"] for k in listed] == ["by-hand", "one", "two"]
    assert set(listed[2]) == {"id", "name", "org_id", "role", "teams", "agent_id", "rate_limit_per_minute", "created_at"}
    assert listed[2]["teams"] == ["ops"] and listed[0]["teams"] is None

    assert main(["keys", "revoke", "--keys-file", str(keys_file), "one"]) == 0
    assert "revoked key 'one'" in capsys.readouterr().out
    assert main(["keys", "revoke", "--keys-file", str(keys_file), second["id"][:8]]) == 0
    capsys.readouterr()
    kept = json.loads(keys_file.read_text())["keys"]
    assert kept == [{"key": "s3cr3t-by-hand", "org_id": "globex", "role": "reader", "name": "by-hand"}]
    with pytest.raises(UnauthorizedError):
        ApiKeys.read(keys_file).authenticate(f"Bearer {first['key']}")

    assert main(["keys", "revoke", "--keys-file", str(keys_file), "one"]) == 1
    assert "no key named 'one'" in capsys.readouterr().err


def test_revoke_refuses_an_ambiguous_id(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.json"
    # Two hand-made hashes sharing their first 8 characters (ids are hash prefixes).
    keys_file.write_text(json.dumps({"keys": [
        {"key_sha256": "abcdef01" + "0" * 56, "org_id": "acme", "role": "reader", "name": "a"},
        {"key_sha256": "abcdef01" + "1" * 56, "org_id": "acme", "role": "reader", "name": "b"},
    ]}))
    keys = KeysFile(keys_file)
    with pytest.raises(ConflictError, match="names 2 keys"):
        keys.revoke("abcdef01")
    assert keys.revoke("abcdef010")["name"] == "a"
    assert [k["name"] for k in keys.listing()] == ["b"]


def test_no_keys_file_is_a_clear_error(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_MEMORY_API_KEYS_FILE", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here either
    assert main(["keys", "list"]) == 1
    assert "--keys-file" in capsys.readouterr().err
    monkeypatch.setenv("AGENT_MEMORY_API_KEYS_FILE", str(tmp_path / "from-env.json"))
    assert main(["keys", "create", "--org", "acme", "--role", "reader"]) == 0
    assert (tmp_path / "from-env.json").exists()


def test_a_key_with_teams_reaches_only_those() -> None:
    keys = ApiKeys([
        {"key": "team-key", "org_id": "acme", "role": "reader", "name": "t", "teams": ["support"]},
        {"key": "org-key", "org_id": "acme", "role": "reader", "name": "o"},
        {"key": "no-team-key", "org_id": "acme", "role": "reader", "name": "n", "teams": []},
    ])
    keys.authenticate("Bearer team-key").require_team("support")
    with pytest.raises(PermissionDeniedError, match="not team 'sales'") as denied:
        keys.authenticate("Bearer team-key").require_team("sales")
    assert denied.value.code == "team_forbidden"
    keys.authenticate("Bearer org-key").require_team("sales")  # no teams named: any team, as before
    with pytest.raises(PermissionDeniedError):
        keys.authenticate("Bearer no-team-key").require_team("support")  # an empty list: none


def test_a_team_key_changes_only_its_teams_memories_and_reads_those_of_no_team() -> None:
    keys = ApiKeys([
        {"key": "team-key", "org_id": "acme", "role": "admin", "name": "t", "teams": ["support"]},
        {"key": "org-key", "org_id": "acme", "role": "admin", "name": "o"},
    ])
    team, org = keys.authenticate("Bearer team-key"), keys.authenticate("Bearer org-key")
    assert team.may_read("support") and team.may_read(None) and not team.may_read("sales")
    team.require_read(None)
    with pytest.raises(PermissionDeniedError, match="not team 'sales'") as denied:
        team.require_read("sales")
    assert denied.value.code == "team_forbidden"
    with pytest.raises(PermissionDeniedError, match="not a memory without a team_id") as denied:
        team.require_team(None)  # written, changed or deleted: only memories of its teams
    assert denied.value.code == "team_forbidden"
    with pytest.raises(PermissionDeniedError, match="erasing a user reaches the memories of every team") as denied:
        team.require_every_team("erasing a user")
    assert denied.value.code == "team_forbidden"
    for team_id in ("support", "sales", None):
        assert org.may_read(team_id)
        org.require_team(team_id)
    org.require_every_team("erasing a user")


@pytest.mark.parametrize("text", ['{"keys": [', "[]", '{"keys": {}}', '{"keys": [7]}',
                                  '{"keys": [{"key": "k", "org_id": "a", "teams": "support"}]}',
                                  '{"keys": [{"key": "k", "org_id": "a", "rate_limit_per_minute": -1}]}',
                                  '{"keys": [{"key": "k", "org_id": "a", "role": "root"}]}'])
def test_files_that_are_not_keys_files_are_refused_clearly(tmp_path: Path, text: str) -> None:
    path = tmp_path / "keys.json"
    path.write_text(text)
    with pytest.raises(InvalidInputError, match="api keys"):
        ApiKeys.read(path)


def _write(path: Path, *keys: str) -> None:
    path.write_text(json.dumps({"keys": [{"key": k, "org_id": "acme", "role": "reader", "name": k} for k in keys]}))


def test_the_ring_rereads_a_changed_file_at_most_once_a_check(tmp_path: Path) -> None:
    path, clock = tmp_path / "keys.json", Clock()
    _write(path, "old")
    ring = KeyRing(path, check_every=1.0, clock=clock)
    ring.current().authenticate("Bearer old")
    KeysFile(path).revoke("old")
    issued = KeysFile(path).issue(org_id="acme", role="writer", name="new")
    # Within the check interval the file is not looked at: the old keys still answer.
    clock.now += 0.5
    ring.current().authenticate("Bearer old")
    clock.now += 0.6
    keys = ring.current()
    assert keys.authenticate(f"Bearer {issued.secret}").key_id == "new"
    with pytest.raises(UnauthorizedError):
        keys.authenticate("Bearer old")


def test_a_broken_file_keeps_the_keys_before_and_says_so_until_fixed(tmp_path: Path, caplog) -> None:
    path, clock = tmp_path / "keys.json", Clock()
    _write(path, "kept", "revoked-meanwhile")
    ring = KeyRing(path, clock=clock, repeat_every=60.0)
    caplog.set_level(logging.INFO, logger="ray.serve")

    def errors() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]

    # A revocation saved as a broken file: the keys before stay in force, with an error.
    path.write_text('{"keys": [{"key": "kept", "org_id": "acme", "name": "kept"}, {"key": "half')
    clock.now += 1.5
    assert ring.current().authenticate("Bearer revoked-meanwhile").key_id == "revoked-meanwhile"
    assert len(errors()) == 1 and "2 keys read before stay in force" in errors()[0]
    assert "revoked since are still accepted" in errors()[0]
    # Checked every second, said again once a minute (and read again then), for as long as it lasts.
    for _ in range(50):
        clock.now += 1.0
        ring.current()
    assert len(errors()) == 1
    clock.now += 11.0
    assert ring.current().authenticate("Bearer kept").key_id == "kept"
    assert len(errors()) == 2
    # Deleted, or a file that cannot be read (here a directory in its place): the same.
    path.unlink()
    clock.now += 1.5
    assert ring.current().authenticate("Bearer kept").key_id == "kept" and len(errors()) == 3
    path.mkdir()
    clock.now += 1.5
    assert ring.current().authenticate("Bearer kept").key_id == "kept" and len(errors()) == 4
    path.rmdir()
    _write(path, "fixed")
    clock.now += 1.5
    assert ring.current().authenticate("Bearer fixed").key_id == "fixed"
    for key in ("kept", "revoked-meanwhile"):
        with pytest.raises(UnauthorizedError):
            ring.current().authenticate(f"Bearer {key}")
    assert any("api keys reloaded" in r.getMessage() for r in caplog.records)
    clock.now += 120.0
    ring.current()
    assert len(errors()) == 4  # nothing more to say once it reads well


def test_a_missing_file_accepts_no_key_until_it_appears(tmp_path: Path, caplog) -> None:
    path, clock = tmp_path / "keys.json", Clock()
    caplog.set_level(logging.INFO, logger="ray.serve")
    ring = KeyRing(path, clock=clock)  # a server started before its first `keys create`
    assert any(r.levelno == logging.WARNING and "does not exist" in r.getMessage() for r in caplog.records)
    for header in (None, "", "Bearer anything", "Bearer "):
        with pytest.raises(UnauthorizedError):
            ring.current().authenticate(header)
    issued = KeysFile(path).issue(org_id="acme", role="reader", name="first")
    clock.now += 1.5
    caller = ring.current().authenticate(f"Bearer {issued.secret}")
    assert (caller.org_id, caller.key_id) == ("acme", "first")


def test_a_file_that_appears_broken_accepts_no_key_until_fixed(tmp_path: Path, caplog) -> None:
    path, clock = tmp_path / "keys.json", Clock()
    ring = KeyRing(path, clock=clock)
    caplog.set_level(logging.INFO, logger="ray.serve")
    path.write_text('{"keys": [{"key": "k", "org_id": "acme", "name": "k"')
    clock.now += 1.5
    with pytest.raises(UnauthorizedError):
        ring.current().authenticate("Bearer k")
    assert any(r.levelno == logging.ERROR and "every request is refused" in r.getMessage() for r in caplog.records)
    _write(path, "k")
    clock.now += 1.5
    assert ring.current().authenticate("Bearer k").key_id == "k"


def test_a_replica_does_not_start_on_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text('{"keys": [')
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        KeyRing(path)


def test_a_kubernetes_secret_swap_is_seen_through_its_links(tmp_path: Path) -> None:
    # A Secret volume: the file is a link through `..data`, itself a link to a timestamped
    # directory; an update writes a new directory and renames a new `..data` link over the old.
    mount, clock = tmp_path / "secret", Clock()
    (mount / "..2026_01_01").mkdir(parents=True)
    _write(mount / "..2026_01_01" / "keys.json", "before")
    os.symlink("..2026_01_01", mount / "..data")
    os.symlink("..data/keys.json", mount / "keys.json")
    ring = KeyRing(mount / "keys.json", clock=clock)
    ring.current().authenticate("Bearer before")

    (mount / "..2026_01_02").mkdir()
    _write(mount / "..2026_01_02" / "keys.json", "after")
    os.symlink("..2026_01_02", mount / "..data_tmp")
    os.replace(mount / "..data_tmp", mount / "..data")
    clock.now += 1.5
    assert ring.current().authenticate("Bearer after").key_id == "after"


def test_a_change_keeps_the_files_mode_owner_and_group(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    _write(path, "by-hand")
    os.chmod(path, 0o640)
    if os.geteuid() == 0:
        os.chown(path, 4242, 4343)  # the server's user and group, say
    before = path.stat()
    keys = KeysFile(path)
    keys.issue(org_id="acme", role="reader", name="one")
    assert path.stat().st_ino != before.st_ino  # replaced, not rewritten in place
    keys.revoke("one")
    after = path.stat()
    assert stat.S_IMODE(after.st_mode) == 0o640
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.json"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file another owner")
def test_an_owner_that_cannot_be_kept_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "keys.json"
    _write(path, "by-hand")
    os.chmod(path, 0o640)
    os.chown(path, 4242, 4343)

    def not_permitted(fd: int, uid: int, gid: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchown", not_permitted)  # what a user other than root and the owner meets
    original = path.read_bytes()
    with pytest.raises(PermissionDeniedError, match="run this as root or as the file's owner"):
        KeysFile(path).issue(org_id="acme", role="reader", name="one")
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.json"]


def test_a_first_file_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        KeysFile(tmp_path / "keys.json").issue(org_id="acme", role="reader")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "keys.json").stat().st_mode) == 0o600


def test_the_new_file_is_synced_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "keys.json"
    _write(path, "by-hand")
    steps: list[str] = []
    fsync, replace = os.fsync, os.replace

    def recorded_fsync(fd: int) -> None:
        steps.append("fsync directory" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        fsync(fd)

    def recorded_replace(src: str, dst: str) -> None:
        steps.append("rename")
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", recorded_replace)
    KeysFile(path).revoke("by-hand")
    assert steps == ["fsync file", "rename", "fsync directory"]
