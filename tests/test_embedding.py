"""Both embedding backends: the bundled offline model, and an OpenAI-compatible endpoint on loopback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest

from agent_memory.embedding import (
    BatchingEmbedder,
    Embedder,
    GlossingEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    build_embedder,
    check_device,
    local,
    onnx,
    resolve_device,
)
from agent_memory.embedding.onnx import OnnxEncoder, execution_providers
from agent_memory.embedding.tokens import ModelFiles, ModelTokenizer, default_threads
from agent_memory.errors import InvalidInputError, UnavailableError
from agent_memory.service import MemoryService
from agent_memory.settings import Settings
from loopback.embeddings_server import DIM, EmbeddingsServer
from storage import LanceStore
from storage.connect import maintenance_of


def test_bundled_model_is_offline_normalised_and_sees_unknown_text(embedder: SentenceTransformerEmbedder) -> None:
    assert embedder.name == "all-MiniLM-L6-v2" and embedder.dim == 384
    vectors = embedder.embed_batch(["I love Python programming", "I often write code in Python", "I like eating apples"])
    assert vectors.dtype == np.float32 and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    unreadable, readable = embedder.oov_shares(["服务器 操作系统", "I love Python"])
    assert unreadable == 1.0 and readable == 0.0
    assert embedder.embed_batch([]).shape == (0, 384)


def test_onnx_runtime_gives_the_vectors_of_torch(embedder: SentenceTransformerEmbedder) -> None:
    # On CPU the bundled model runs on ONNX Runtime; stored vectors from either backend mix freely.
    assert embedder.backend == "onnx"
    reference = SentenceTransformerEmbedder(backend="torch")
    assert reference.backend == "torch"
    texts = ["I love Python programming", "用户喜欢吃苹果", "word " * 400, "", "Refunds need two approvals"]
    texts += [f"memory number {i} about tea" for i in range(40)]  # several length-sorted batches
    fast, slow = embedder.embed_batch(texts), reference.embed_batch(texts)
    assert fast.shape == slow.shape == (45, 384) and fast.dtype == np.float32
    assert np.abs(fast - slow).max() < 1e-5
    assert np.abs(embedder.embed_batch(["just one query"]) - reference.embed_query("just one query")).max() < 1e-5
    with pytest.raises(InvalidInputError, match="embedding_backend"):
        SentenceTransformerEmbedder(backend="tensorflow")


def test_the_device_is_cpu_here_and_a_missing_gpu_is_refused_with_its_reason(
    embedder: SentenceTransformerEmbedder, settings: Settings,
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: auto picks it")
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    assert embedder.device == "cpu" and embedder.backend == "onnx"
    check_device(settings)  # auto: nothing to refuse
    cuda = settings.replace(embedding_device="cuda")
    for refused in (lambda: resolve_device("cuda"), lambda: check_device(cuda),
                    lambda: SentenceTransformerEmbedder(device="cuda")):
        with pytest.raises(UnavailableError, match="EMBEDDING_DEVICE is cuda, but torch .* sees no CUDA device"):
            refused()
    check_device(cuda.replace(embedding_model="openai:text-embedding-3-small"))  # a remote model: no local device
    with pytest.raises(InvalidInputError, match="embedding_device"):
        resolve_device("tpu")


def test_onnx_runtime_on_cuda_needs_its_gpu_build() -> None:
    assert execution_providers("cpu") == ["CPUExecutionProvider"]
    assert execution_providers("cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"]) == [
        "CUDAExecutionProvider", "CPUExecutionProvider"]
    with pytest.raises(ValueError, match="no CUDA provider: install its GPU build"):
        execution_providers("cuda", ["CPUExecutionProvider"])


@pytest.mark.store  # loads the bundled model
def test_a_stale_or_broken_cached_graph_is_exported_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = SentenceTransformerEmbedder()
    graphs = list((tmp_path / "agent-memory" / "onnx").glob("*.onnx"))
    assert first.backend == "onnx" and len(graphs) == 1
    graphs[0].write_bytes(b"not a graph")  # a damaged cache entry
    second = SentenceTransformerEmbedder()
    assert second.backend == "onnx" and graphs[0].stat().st_size > 1_000_000
    assert not list(graphs[0].parent.glob("*.partial"))
    assert np.abs(second.embed_batch(["hello"]) - first.embed_batch(["hello"])).max() < 1e-6


def test_int8_queries_stay_close_to_the_exact_vectors(embedder: SentenceTransformerEmbedder, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "agent-memory" / "onnx"
    quick = SentenceTransformerEmbedder(precision="int8")
    assert (quick.backend, quick.precision, quick.name, quick.dim) == ("onnx", "int8", embedder.name, embedder.dim)
    [exact_graph] = [g for g in cache.glob("*.onnx") if "-int8-" not in g.name]
    [int8_graph] = cache.glob(f"{exact_graph.stem}-int8-*.onnx")
    queries = [
        "what does the user drink in the morning", "which editor do they use", "where did they go on holiday",
        "dietary restrictions", "preferred programming language", "deployment schedule of the team",
        "who approves refunds", "favourite football club", "allergies", "home city", "用户喜欢吃苹果",
        "", "word " * 400,
    ]
    exact, approximate = embedder.embed_batch(queries), quick.embed_batch(queries)
    cosines = (exact * approximate).sum(axis=1)
    assert np.abs(exact - approximate).max() > 1e-3  # another graph indeed, not the exact one again
    assert cosines.mean() > 0.98 and cosines.min() > 0.95
    # What recall ranks on: the closest of a few stored (exact) vectors stays the closest.
    stored = embedder.embed_batch(["I often write code in Python", "I like eating apples", "Refunds need two approvals"])
    probes = ["what language does the user program in", "favourite fruit", "how are refunds approved"]
    assert (quick.embed_batch(probes) @ stored.T).argmax(axis=1).tolist() == [0, 1, 2]

    # A healthy cached copy is used as it is; a damaged one is made again.
    made = int8_graph.stat().st_mtime_ns
    assert SentenceTransformerEmbedder(precision="int8").precision == "int8" and int8_graph.stat().st_mtime_ns == made
    int8_graph.write_bytes(b"not a graph")
    again = SentenceTransformerEmbedder(precision="int8")
    assert again.precision == "int8" and int8_graph.stat().st_size > 1_000_000
    assert np.abs(again.embed_batch(queries) - approximate).max() < 1e-6
    # The exact graph exported again (a damaged cache here, new weights elsewhere): a new int8 copy
    # is made from it, and the old one removed.
    exact_graph.write_bytes(b"not a graph")
    assert SentenceTransformerEmbedder(precision="int8").precision == "int8"
    [remade] = cache.glob(f"{exact_graph.stem}-int8-*.onnx")
    assert remade != int8_graph and not list(cache.glob("*.partial"))

    # A model whose int8 copy drifts too far runs its queries on the exact graph, not on torch.
    monkeypatch.setattr("agent_memory.embedding.onnx.INT8_MIN_COSINE", 1.01)
    refused = SentenceTransformerEmbedder(precision="int8")
    assert (refused.backend, refused.precision) == ("onnx", "fp32")
    assert np.abs(refused.embed_batch(queries) - exact).max() < 1e-5

    # int8 queries by default, on one thread (exact ones on two), unless set; exact where torch is asked for.
    assert Settings(_env_file=None).embedding.query_precision == "int8"
    assert Settings(_env_file=None).embedding.query_model_threads == 1
    assert Settings(_env_file=None, query_embedding_precision="fp32").embedding.query_model_threads == 2
    assert Settings(_env_file=None, embedding_backend="torch").embedding.query_precision == "fp32"
    assert Settings(_env_file=None, query_embedding_precision="int8", query_embedding_threads=3).embedding.query_model_threads == 3
    with pytest.raises(ValueError, match="embedding_backend must be auto or onnx"):
        Settings(_env_file=None, query_embedding_precision="int8", embedding_backend="torch")
    with pytest.raises(InvalidInputError, match="fp32 or int8"):
        SentenceTransformerEmbedder(precision="int4")
    with pytest.raises(InvalidInputError, match="embedding_backend must be auto or onnx"):
        SentenceTransformerEmbedder(backend="torch", precision="int8")


LIGHT_LOAD = """
import json, sys
from agent_memory.embedding import SentenceTransformerEmbedder
texts = json.loads(sys.argv[1])
out = {}
for precision in ("fp32", "int8"):
    e = SentenceTransformerEmbedder(precision=precision)
    out[precision] = {"model": e.model is not None, "precision": e.precision, "dim": e.dim,
                      "vectors": e.embed_batch(texts).tolist(), "oov": e.oov_shares(texts)}
out["heavy"] = sorted(m for m in ("torch", "transformers", "sentence_transformers") if m in sys.modules)
print(json.dumps(out))
"""


@pytest.mark.store  # exports the bundled model's graphs
def test_a_checked_graph_runs_without_loading_the_model(tmp_path, monkeypatch) -> None:
    # The first process exports each graph and checks it against the model; the next runs it with
    # the tokenizer of tokenizer.json alone: no torch, no transformers, the same vectors.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    texts = ["I love Python programming", "用户喜欢吃苹果", "word " * 400, "", "Café MÜNCHEN 🙂", "服务器 操作系统"]
    exact, quick = SentenceTransformerEmbedder(), SentenceTransformerEmbedder(precision="int8")
    assert exact.model is not None and quick.precision == "int8"
    run = subprocess.run([sys.executable, "-c", LIGHT_LOAD, json.dumps(texts)], capture_output=True, text=True,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)}, timeout=300, check=True)
    light = json.loads(run.stdout.strip().splitlines()[-1])
    assert light["heavy"] == []
    for precision, reference in (("fp32", exact), ("int8", quick)):
        got = light[precision]
        assert (got["model"], got["precision"], got["dim"]) == (False, precision, 384)
        assert np.abs(np.asarray(got["vectors"]) - reference.embed_batch(texts)).max() < 1e-6
        assert got["oov"] == reference.oov_shares(texts)

    # Only a graph whose record names the file as it is, passes today's bar and vouches for the
    # tokenizer runs so; anything else loads the model, which checks the graph and records it again.
    path, lock = local.bundled_model_path(), threading.Lock()
    [graph] = [g for g in (tmp_path / "agent-memory" / "onnx").glob("*.onnx") if "-int8-" not in g.name]
    record_file = graph.with_name(graph.name + ".json")
    record = json.loads(record_file.read_text())
    assert record["same_tokens"] and record["max_difference"] < 1e-4
    assert OnnxEncoder.from_cache(path, lock) is not None and OnnxEncoder.from_cache(path, lock, precision="int8") is not None
    record_file.write_text(json.dumps({**record, "same_tokens": False}))
    assert OnnxEncoder.from_cache(path, lock) is None
    record_file.write_text(json.dumps({**record, "libraries": {**record["libraries"], "transformers": "0.1"}}))
    assert OnnxEncoder.from_cache(path, lock) is None  # checked by other libraries: an upgrade checks again
    record_file.write_text(json.dumps(record))
    os.utime(graph, ns=(record["mtime_ns"] + 10**9, record["mtime_ns"] + 10**9))  # another file at the same name
    assert OnnxEncoder.from_cache(path, lock) is None
    assert SentenceTransformerEmbedder().model is not None and OnnxEncoder.from_cache(path, lock) is not None
    monkeypatch.setattr(onnx, "INT8_MIN_COSINE", 1.01)
    assert OnnxEncoder.from_cache(path, lock, precision="int8") is None
    assert OnnxEncoder.from_cache("sentence-transformers/all-MiniLM-L6-v2", lock) is None  # a hub name: not a directory


def test_a_model_directory_runs_without_its_model_only_in_the_shape_the_graph_computes(tmp_path) -> None:
    def directory(modules: tuple[str, ...] = ("Transformer", "Pooling", "Normalize"), pooling: str = "mean_tokens",
                  lower: bool = False, prompt: str | None = None, tokenizer: bool = True) -> str:
        root = tmp_path / f"model-{len(list(tmp_path.iterdir()))}"
        (root / "1_Pooling").mkdir(parents=True)
        paths = {"Transformer": "", "Pooling": "1_Pooling", "Normalize": "2_Normalize", "Dense": "2_Dense"}
        listed = [{"idx": i, "name": str(i), "path": paths[m], "type": f"sentence_transformers.models.{m}"}
                  for i, m in enumerate(modules)]
        (root / "modules.json").write_text(json.dumps(listed))
        (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": lower}))
        modes = {f"pooling_mode_{m}": m == pooling for m in ("cls_token", "mean_tokens", "max_tokens")}
        (root / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 96, **modes}))
        (root / "config_sentence_transformers.json").write_text(json.dumps({"default_prompt_name": prompt}))
        (root / "special_tokens_map.json").write_text(json.dumps({"unk_token": {"content": "[UNK]"}}))
        if tokenizer:
            (root / "tokenizer.json").write_text("{}")
        return str(root)

    files = ModelFiles.read(directory())
    assert files is not None and (files.max_length, files.dim, files.unk_token) == (128, 96, "[UNK]")
    assert ModelFiles.read(directory(("Transformer", "Pooling"))) is not None
    for other in (directory(pooling="cls_token"), directory(lower=True), directory(prompt="query"),
                  directory(tokenizer=False), directory(("Transformer", "Pooling", "Dense")),
                  str(tmp_path / "missing"), "sentence-transformers/all-MiniLM-L6-v2"):
        assert ModelFiles.read(other) is None


def test_threads_and_device_are_found_without_torch(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_threads() == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert 1 <= default_threads() <= len(os.sched_getaffinity(0))
    monkeypatch.delattr(os, "sched_getaffinity")  # as on macOS and Windows
    assert 1 <= default_threads() <= (os.cpu_count() or 1)
    # No GPU driver on the machine: CPU, and torch (seconds to import) is never asked.
    monkeypatch.setattr(local, "GPU_DEVICE_FILES", (str(tmp_path / "nvidiactl"),))
    monkeypatch.setitem(sys.modules, "torch", None)  # importing it now would fail
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    # Asked for by name, CUDA is torch's to find: the driver makes its device files when CUDA starts.
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True)))
    assert resolve_device("cuda") == "cuda"


@pytest.mark.store  # transformers' tokenizer of the bundled model
def test_tokenizer_json_alone_is_trusted_only_where_it_cuts_and_pads_on_the_models_side(tmp_path) -> None:
    from transformers import AutoTokenizer

    for setting in ({}, {"truncation_side": "left"}, {"padding_side": "left"}):
        root = tmp_path / (next(iter(setting), "as-shipped"))
        shutil.copytree(local.bundled_model_path(), root, ignore=shutil.ignore_patterns("*.safetensors"))
        config = json.loads((root / "tokenizer_config.json").read_text())
        (root / "tokenizer_config.json").write_text(json.dumps({**config, **setting}))
        tokenizer = ModelTokenizer(AutoTokenizer.from_pretrained(str(root), model_max_length=256), 256)
        assert onnx._tokenizes_alike(tokenizer, str(root)) is (not setting), setting


def _wait_until(condition: Callable[[], object], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.01)


@pytest.fixture
def openai_server():
    server = EmbeddingsServer()
    yield server
    server.close()


def test_openai_compatible_backend(openai_server: EmbeddingsServer) -> None:
    settings = Settings(embedding_model="openai:test-embed", embedding_base_url=openai_server.url,
                        embedding_api_key="k", embedding_batch_size=2, _env_file=None)  # type: ignore[call-arg]
    embedder = build_embedder(settings)
    assert isinstance(embedder, OpenAIEmbedder) and embedder.name == "openai:test-embed" and embedder.dim == DIM
    vectors = embedder.embed_batch(["refund policy", "refund policy details", "weather today"])
    assert vectors.shape == (3, DIM) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    openai_server.fail_with = 503
    with pytest.raises(UnavailableError):
        embedder.embed_batch(["anything"])


@pytest.mark.store
def test_recall_degrades_to_keywords_when_the_embedder_is_down(openai_server: EmbeddingsServer, tmp_path) -> None:
    settings = Settings(storage_uri=str(tmp_path / "db"), embedding_model="openai:test-embed",  # type: ignore[call-arg]
                        embedding_base_url=openai_server.url, _env_file=None)
    embedder = build_embedder(settings)
    store = LanceStore(settings.storage.uri, embedding_model=embedder.name, embedding_dim=embedder.dim)
    service = MemoryService(store, embedder, settings, defer_access=False)
    service.add("acme", {"user_id": "u1", "content": "Refunds need two approvals"})
    service.add("acme", {"user_id": "u1", "content": "Lunch is at noon"})
    healthy = service.recall("acme", {"user_id": "u1", "query": "how are refunds approved"})
    assert not healthy.degraded and healthy.memories[0].content == "Refunds need two approvals"
    openai_server.fail_with = 503
    degraded = service.recall("acme", {"user_id": "u1", "query": "refunds approvals"})
    assert degraded.degraded and degraded.memories[0].content == "Refunds need two approvals"
    assert degraded.memories[0].scores.semantic == 0.0
    with pytest.raises(UnavailableError):
        service.add("acme", {"user_id": "u1", "content": "never half-stored"})
    assert maintenance_of(store).table("memories").count_rows() == 2  # the failed write left nothing behind
    service.close()


def test_concurrent_queries_share_forward_passes(openai_server: EmbeddingsServer) -> None:
    settings = Settings(embedding_model="openai:test-embed", embedding_base_url=openai_server.url,  # type: ignore[call-arg]
                        _env_file=None)
    inner = build_embedder(settings)
    batcher = BatchingEmbedder(inner, max_batch=4, timeout_s=120)
    openai_server.batches = []
    openai_server.answering.clear()  # the first pass is held until the others have queued behind it
    queries = [f"question number {i}" for i in range(9)]
    with ThreadPoolExecutor(max_workers=9) as pool:
        first = pool.submit(batcher.embed_query, queries[0])
        _wait_until(lambda: openai_server.batches == [1])  # the first query is in its pass
        waiting = pool.map(batcher.embed_query, queries[1:])
        _wait_until(lambda: len(batcher._pending) == 8)  # the queue the batching thread takes passes from
        openai_server.answering.set()
        rest = list(waiting)
    # A lone query went at once, with no waiting window; the eight that queued went as two passes.
    assert openai_server.batches == [1, 4, 4] and batcher.batch_sizes == [1, 4, 4]
    assert np.allclose(np.stack([first.result(), *rest]), inner.embed_batch(queries), atol=1e-6)


def test_a_slow_or_failing_model_makes_queries_unavailable_not_stuck(openai_server: EmbeddingsServer) -> None:
    settings = Settings(embedding_model="openai:test-embed", embedding_base_url=openai_server.url,  # type: ignore[call-arg]
                        _env_file=None)
    impatient = BatchingEmbedder(build_embedder(settings), timeout_s=0.2)
    patient = BatchingEmbedder(build_embedder(settings), timeout_s=30)
    openai_server.delay_s = 1.0
    with pytest.raises(UnavailableError, match="did not answer"):
        impatient.embed_query("slow")
    openai_server.delay_s, openai_server.fail_with = 0.0, 503
    with pytest.raises(UnavailableError, match="embedding endpoint failed"):
        patient.embed_query("failing")
    openai_server.fail_with = None
    assert patient.embed_query("recovered").shape == (DIM,)


def test_the_local_model_serves_many_threads_at_once(embedder: SentenceTransformerEmbedder) -> None:
    # Queries of a search replica's threads: vectors and vocabulary coverage at the same time.
    # A fast tokenizer is shared state: unguarded, a coverage call switched padding off under a
    # batch of queries of different lengths ("setting an array element with a sequence").
    batcher = BatchingEmbedder(embedder, timeout_s=60)
    texts = [("which editor does the user use " * (1 + i % 12)) + f"用户 {i}" for i in range(160)]

    def both(text: str) -> tuple[np.ndarray, float]:
        return batcher.embed_query(text), embedder.oov_shares([text, text + " more"])[0]

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(both, texts))
    assert np.abs(np.stack([v for v, _ in results]) - embedder.embed_batch(texts)).max() < 1e-5
    assert max(batcher.batch_sizes) > 1  # concurrent queries did share passes
    assert [share for _, share in results] == embedder.oov_shares(texts)


def test_the_bundled_model_reads_chinese_through_its_gloss(embedder: Embedder) -> None:
    glossing = GlossingEmbedder(embedder)
    memories = ["我老公在银行上班。", "我们家的猫叫土豆，今年三岁了。", "周末我常去爬山。"]
    question = "她丈夫在哪里工作？"
    # The model alone reads under 60% of it and ranks the cat first; through the gloss it reads all
    # of it, and the question is nearest the memory that answers it.
    assert min(embedder.oov_shares(memories)) > 0.4 and max(glossing.oov_shares(memories)) < 0.1
    assert int(np.argmax(embedder.embed_batch(memories) @ embedder.embed_query(question))) != 0
    cosines = glossing.embed_batch(memories) @ glossing.embed_query(question)
    assert int(np.argmax(cosines)) == 0
    # English goes to the model as it is.
    assert np.allclose(glossing.embed_batch(["refund policy"]), embedder.embed_batch(["refund policy"]), atol=1e-6)


def test_chinese_is_glossed_for_the_bundled_model_only_unless_told() -> None:
    def glosses(**values: str) -> bool:
        return Settings(_env_file=None, **values).embedding.glosses_chinese()  # type: ignore[call-arg]

    assert glosses() and not glosses(embedding_model="openai:text-embedding-3-small")
    assert glosses(embedding_model="some/multilingual-model", embedding_gloss_chinese="on")
    # An embeddings endpoint is given the texts as they are.
    assert not glosses(embedding_model="openai:text-embedding-3-small", embedding_gloss_chinese="on")
    assert not glosses(embedding_gloss_chinese="off")
