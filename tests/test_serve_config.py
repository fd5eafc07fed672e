"""The Serve config's entry point and HAProxy's, without Ray: `app_builder` takes settings as its
args, and only those; HAProxy runs Serve's config with its monitoring on loopback, its ports
chosen as documented, and answers 503 with a JSON reason where no application serves."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from ray import serve

from agent_memory.errors import InvalidInputError
from agent_memory.settings import Settings
from serve_app.app import app_builder
from serve_app.config import haproxy_env, monitoring_line, real_haproxy_binary
from serve_app.haproxy import LayoutChanged, launched_binary, served_config, write_launcher


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


def _serve_config(tmp_path: Path, stats_port: int = 18404, metrics_port: int = 19101) -> Path:
    """The HAProxy config Serve writes before any application is deployed (Ray's own template)."""
    from ray.serve._private.haproxy import HAProxyApi, HAProxyConfig

    cfg = HAProxyConfig(socket_path=str(tmp_path / "admin.sock"), server_state_base=str(tmp_path),
                        server_state_file=str(tmp_path / "state"), metrics_socket_path=str(tmp_path / "metrics.sock"),
                        stats_port=stats_port, metrics_port=metrics_port)
    path = tmp_path / "haproxy.cfg"
    HAProxyApi(cfg=cfg, config_file_path=str(path))._generate_config_file_internal()
    return path


def _check(binary: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, "-c", "-f", str(config)], capture_output=True, text=True, timeout=60)


@pytest.mark.unit  # HAProxy checks and serves a config: a light process, no Ray
@pytest.mark.parametrize(("host", "bind"), [("127.0.0.1", "127.0.0.1:"), ("::1", "[::1]:"), ("0.0.0.0", None)])
def test_haproxy_serves_monitoring_on_the_host_given_and_503_where_no_application_is(
    tmp_path: Path, host: str, bind: str | None
) -> None:
    original = _serve_config(tmp_path).read_text()
    served = served_config(original, monitor_host=host)
    if bind is None:  # every interface: the binds stay as Serve writes them
        assert "bind :19101" in served and "bind *:18404" in served
    else:
        assert f"bind {bind}19101" in served and f"bind {bind}18404" in served
        assert "bind :19101" not in served and "bind *:18404" not in served
    assert "not found" not in served.split("backend default_backend", 1)[1].split("\nlisten", 1)[0]
    frontend = served.split("frontend http_frontend", 1)[1].split("\nbackend ", 1)[0]
    assert "http-response return status 503 content-type application/json" in frontend
    (path := tmp_path / "served.cfg").write_text(served)
    checked = _check(real_haproxy_binary(), path)
    assert checked.returncode == 0, checked.stderr


def test_haproxy_config_of_another_layout_is_refused_not_served_open() -> None:
    with pytest.raises(LayoutChanged, match="listen stats"):
        served_config("frontend prometheus\n    bind :9101\nbackend default_backend\n"
                      "    http-request return status 404 x\n", monitor_host="127.0.0.1")


def test_the_launcher_runs_haproxy_on_the_served_config(tmp_path: Path) -> None:
    binary = real_haproxy_binary()
    launcher = write_launcher(binary, "127.0.0.1", tmp_path / "bin")
    assert launched_binary(str(launcher)) == binary and launched_binary(binary) is None
    assert write_launcher(binary, "127.0.0.1", tmp_path / "bin") == launcher  # one file per binary and host
    # A launcher given as the binary (a server started by another) is not wrapped twice.
    assert write_launcher(str(launcher), "127.0.0.1", tmp_path / "bin") == launcher
    config = _serve_config(tmp_path)
    checked = _check(str(launcher), config)
    assert checked.returncode == 0, checked.stderr
    served = Path(f"{config}.served").read_text()
    assert "bind 127.0.0.1:18404" in served and '"code\\": \\"unavailable' in served


def _holding(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_monitoring_ports_are_the_documented_ones_the_ones_set_or_refused(monkeypatch) -> None:
    monkeypatch.delenv("RAY_SERVE_HAPROXY_BINARY_PATH", raising=False)
    free = Settings(haproxy_stats_port=0, haproxy_metrics_port=0, _env_file=None)  # type: ignore[call-arg]
    env = haproxy_env(free)
    stats, metrics = int(env["RAY_SERVE_HAPROXY_STATS_PORT"]), int(env["RAY_SERVE_HAPROXY_METRICS_PORT"])
    real = launched_binary(env["RAY_SERVE_HAPROXY_BINARY_PATH"])
    assert stats and metrics and real == real_haproxy_binary()
    # A server started by this one inherits its launcher, and runs the same binary through its own.
    monkeypatch.setenv("RAY_SERVE_HAPROXY_BINARY_PATH", env["RAY_SERVE_HAPROXY_BINARY_PATH"])
    assert real_haproxy_binary() == real
    assert launched_binary(haproxy_env(free)["RAY_SERVE_HAPROXY_BINARY_PATH"]) == real
    line = monitoring_line({"RAY_SERVE_ENABLE_HA_PROXY": "1", **env}, free)
    assert line == (f"HAProxy stats: http://127.0.0.1:{stats}/stats  Prometheus: http://127.0.0.1:{metrics}/metrics  "
                    "(this machine only)")
    with _holding(stats), _holding(metrics):
        # Set and held: refused, saying which and how to choose another.
        given = Settings(haproxy_stats_port=stats, _env_file=None)  # type: ignore[call-arg]
        with pytest.raises(InvalidInputError, match=f"port {stats} on 127.0.0.1 .HAProxy's stats page, "
                                                    "AGENT_MEMORY_HAPROXY_STATS_PORT. is in use"):
            haproxy_env(given)
        # Unset: the documented port where it is free, another where it is held.
        default = haproxy_env(Settings(_env_file=None))  # type: ignore[call-arg]
        for key, documented in (("RAY_SERVE_HAPROXY_STATS_PORT", 8404), ("RAY_SERVE_HAPROXY_METRICS_PORT", 9101)):
            port = int(default[key])
            assert port not in (stats, metrics)
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                documented_free = probe.connect_ex(("127.0.0.1", documented)) != 0
            assert port == documented or not documented_free
    everywhere = Settings(haproxy_monitor_host="0.0.0.0", _env_file=None)  # type: ignore[call-arg]
    assert "every interface, without a key" in monitoring_line({"RAY_SERVE_ENABLE_HA_PROXY": "1", **env}, everywhere)
    assert json.loads(json.dumps(env))  # plain strings, for a runtime_env
