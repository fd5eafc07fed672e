"""The command line as a user runs it, in subprocesses: what its commands write on standard error
(their own lines only, the libraries' with -v), and the data commands through a running server
(the shared Serve app), which load neither the store, Ray nor the model; and the Python API, which
writes nothing on standard error either."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample_history.jsonl"
HEAVY = ("agent_memory", "storage", "lancedb", "lance", "ray", "torch", "onnxruntime", "transformers",
         "sentence_transformers")
# The lines `agent-memory mcp` writes itself on standard error.
MCP_OWN = re.compile(r"agent-memory MCP server (on stdio|at http://\S+), over ")


def _env(**extra: str) -> dict[str, str]:
    """This environment without a server, a store or a cluster of its own: each test names its."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("AGENT_MEMORY_URL", "AGENT_MEMORY_API_KEY", "AGENT_MEMORY_STORAGE_URI", "RAY_ADDRESS",
                          "PYTHONWARNINGS")}
    path = os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")])  # the client, where the venv lacks it
    return {**env, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": path, **extra}


def _cli(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.main", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.store  # the commands import torch to look for the device
def test_a_gpu_asked_for_where_there_is_none_stops_serve_and_import_at_start(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    env = _env(AGENT_MEMORY_STORAGE_URI=str(tmp_path / "lancedb"), AGENT_MEMORY_EMBEDDING_DEVICE="cuda")
    for argv in (("import", str(SAMPLE)), ("serve", "--port", "18991")):
        done = _cli(*argv, env=env)
        assert done.returncode == 1, f"{argv[0]}: {done.stderr[-2000:]}"
        assert "AGENT_MEMORY_EMBEDDING_DEVICE is cuda, but torch" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "lancedb").exists(), "nothing was written before the refusal"


@pytest.mark.store  # a LanceDB on a temporary directory, and `serve` in a process of its own
def test_serve_says_at_start_that_the_stores_chinese_was_embedded_another_way(tmp_path: Path) -> None:
    """Its replicas log it only in Ray's logs: `serve` itself prints it, in one line, without -v.
    Here the port is held, so the command stops right after (no Ray, no model)."""
    from storage.lance_store import LanceStore

    uri = str(tmp_path / "lancedb")
    LanceStore(uri, embedding_model="all-MiniLM-L6-v2", embedding_dim=384, chinese_gloss=False)  # recorded "off"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        # The bundled model's settings embed Chinese through its gloss.
        done = _cli("serve", "--port", str(held.getsockname()[1]), env=_env(AGENT_MEMORY_STORAGE_URI=uri))
    assert done.returncode == 2 and "is in use" in done.stderr, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "reindex" in line]
    assert len(said) == 1 and said[0].startswith(f"warning: the Chinese memories of the store at {uri} were "
                                                 "embedded as written"), done.stderr[-3000:]
    assert "run `agent-memory reindex`" in said[0]


@pytest.mark.store  # the commands load the model, open LanceDB and start a Ray of their own
def test_commands_on_a_store_write_no_line_of_the_libraries(tmp_path: Path) -> None:
    """add, search, import and consolidate (on Ray: its Data actors make Ray's C++ core log an error
    line) print their results and nothing else; -v shows what the libraries said."""
    env = _env(AGENT_MEMORY_STORAGE_URI=str(tmp_path / "lancedb"))
    history = tmp_path / "history.jsonl"
    history.write_text("".join(SAMPLE.read_text(encoding="utf-8").splitlines(True)[:30]), encoding="utf-8")
    runs = {
        "add": _cli("add", "--user-id", "alice", "I prefer answers in bullet points", env=env),
        "search": _cli("search", "--user-id", "alice", "how should I format answers?", env=env),
        "import": _cli("import", str(history), "--report", str(tmp_path / "import.report.json"), env=env),
        "consolidate": _cli("consolidate", "--engine", "ray", env=env),
    }
    for name, done in runs.items():
        assert done.returncode == 0, f"{name}: {done.stderr[-3000:]}"
        assert done.stderr == "", f"{name} wrote on standard error:\n{done.stderr[-3000:]}"
    assert "bullet points" in runs["search"].stdout
    assert json.loads(runs["import"].stdout)["memories_written"] == 30
    assert json.loads(runs["consolidate"].stdout)["engine"] == "ray-data"

    verbose = _cli("consolidate", "--engine", "ray", "-v", env=env)
    assert verbose.returncode == 0 and verbose.stderr.strip(), "-v shows the libraries' lines"


@pytest.mark.store  # the model and a LanceDB, in a Python process of its own
def test_the_python_api_writes_nothing_on_standard_error(tmp_path: Path) -> None:
    """`open_service()`, a write and a recall, as a program calling the library runs them: the
    model loads without its "Loading weights" bar, and nothing else of the libraries shows."""
    program = ("from agent_memory import open_service\n"
               "service = open_service()\n"
               "service.add('acme', {'user_id': 'u1', 'content': 'Refunds need two approvals'})\n"
               "print(service.recall('acme', {'user_id': 'u1', 'query': 'how are refunds approved?'}).memories[0].content)\n"
               "service.close()\n")
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=_env(AGENT_MEMORY_STORAGE_URI=str(tmp_path / "lancedb")))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "Refunds need two approvals"
    assert done.stderr == "", done.stderr[-3000:]


def test_mcp_writes_only_its_own_line_for_a_request(serve_app: dict[str, object], tmp_path: Path) -> None:
    """Over stdio, through the shared server: no line of httpx's for the call to the server, none of
    the MCP SDK's for the request."""
    errors = tmp_path / "mcp.stderr"

    async def one_request() -> None:
        params = StdioServerParameters(
            command=sys.executable, cwd=ROOT, env=_env(),
            args=["-m", "cli.main", "mcp", "--url", str(serve_app["url"]), "--api-key", "acme-reader"])
        with errors.open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                recalled = await session.call_tool("recall", {"user_id": "nobody-" + uuid.uuid4().hex[:8],
                                                              "query": "anything?"})
                assert not recalled.is_error

    asyncio.run(asyncio.wait_for(one_request(), 180))
    lines = [line for line in errors.read_text().splitlines() if line.strip()]
    assert lines and all(MCP_OWN.match(line) for line in lines), lines


# -- through a server ------------------------------------------------------------------------------


def test_data_commands_through_a_server_load_no_engine(serve_app: dict[str, object], api) -> None:  # type: ignore[no-untyped-def]
    """`add` and `search` with AGENT_MEMORY_URL: answered by the server, the command loads none of
    the store, Ray or the model; `search --json` is the HTTP answer."""
    user = f"cli-{uuid.uuid4().hex[:8]}"
    env = _env(AGENT_MEMORY_URL=str(serve_app["url"]), AGENT_MEMORY_API_KEY="acme-writer")
    probe = ("import json, sys\nfrom cli.main import main\ncode = main(sys.argv[1:])\n"
             f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))), "
             "file=sys.stderr)\nsys.exit(code)")
    added = subprocess.run([sys.executable, "-c", probe, "add", "--user-id", user, "--type", "procedural",
                            "退款需要两级审批"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stderr.splitlines()[-1]) == [] and len(added.stderr.splitlines()) == 1, added.stderr
    memory_id = added.stdout.strip()

    searched = _cli("search", "--user-id", user, "--json", "退款流程是什么？", env=env)
    assert searched.returncode == 0 and searched.stderr == "", searched.stderr
    answer = json.loads(searched.stdout)
    expected = api("acme-reader").post("/v1/memories/search", json={"user_id": user, "query": "退款流程是什么？"}).json()
    assert [hit["id"] for hit in answer["memories"]] == [hit["id"] for hit in expected["memories"]] == [memory_id]
    assert set(answer["memories"][0]) == set(expected["memories"][0])

    listed = _cli("search", "--user-id", user, "退款", env=env)
    assert listed.returncode == 0 and "[procedural] 退款需要两级审批" in listed.stdout

    # A reader key: the server refuses the write, and the command says so as every error.
    refused = _cli("add", "--user-id", user, "x", env={**env, "AGENT_MEMORY_API_KEY": "acme-reader"})
    assert refused.returncode == 1 and refused.stderr.startswith("error (forbidden): "), refused.stderr
