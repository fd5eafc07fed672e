"""The Serve config's entry point, without Ray: `app_builder` takes settings as its args, and only those."""

from __future__ import annotations

import pytest
from ray import serve

from agent_memory.errors import InvalidInputError
from serve_app.app import app_builder


def test_app_builder_refuses_args_that_are_no_setting(tmp_path) -> None:
    with pytest.raises(InvalidInputError) as refused:
        app_builder({"storage_uri": str(tmp_path / "lancedb"), "num_replica": 2, "bogus": "x"})
    message = str(refused.value)
    assert "unknown Serve application args: bogus, num_replica." in message
    accepted = message.split("accepted: ", 1)[1].split(", ")
    assert "storage_uri" in accepted and "write_window_ms" in accepted


def test_app_builder_builds_the_application_from_known_args(tmp_path) -> None:
    app = app_builder({"storage_uri": str(tmp_path / "lancedb")})
    assert isinstance(app, serve.Application)
    assert not (tmp_path / "lancedb").exists()  # built, not deployed: nothing opened yet
