"""Small rules of the serving path that need neither Ray nor a store: which requests wait for a
replica's start, and which Lance errors a commit retries."""

from __future__ import annotations

import pytest

from serve_app.middleware import api_path
from storage.tables import dropped_version, retrying


def test_the_api_path_is_read_below_the_apps_route_prefix() -> None:
    # An app deployed with `route_prefix="/team"` sees its requests' paths with the prefix in
    # front (ASGI's root_path); its API's requests wait for its start like the root app's.
    assert api_path({"path": "/team/v1/memories/search", "root_path": "/team"}) == "/v1/memories/search"
    assert api_path({"path": "/v1/memories", "root_path": ""}) == "/v1/memories"
    assert api_path({"path": "/v1/memories"}) == "/v1/memories"
    assert api_path({"path": "/team/healthz", "root_path": "/team"}) == "/healthz"


def test_a_commit_whose_version_was_purged_meanwhile_is_retried_and_other_errors_are_not() -> None:
    gone = ("lance error: Not found: /data/lancedb/jobs.lance/_versions/18446744073709551348.manifest, "
            "/root/.cargo/registry/src/lance-table-13.0.0/src/io/manifest.rs:52:15")
    assert dropped_version(gone.lower())
    assert not dropped_version("lance error: not found: /data/lancedb/jobs.lance/data/abc.lance")
    calls: list[int] = []

    def commit() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError(gone)
        return "committed"

    assert retrying(commit, "put job") == "committed" and len(calls) == 3
    with pytest.raises(ValueError, match="a bad row"):
        retrying(lambda: (_ for _ in ()).throw(ValueError("a bad row")), "put job")
