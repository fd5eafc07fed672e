"""Re-embedding with another model: snapshot on Ray, catch-up of writes made meanwhile, atomic switch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from agent_memory.embedding import SentenceTransformerEmbedder, bundled_model_path
from agent_memory.errors import ConflictError
from agent_memory.models import Scope
from agent_memory.service import MemoryService
from jobs.reembed import Reembedding, reembed
from storage import LanceStore
from storage import schema as sc
from storage.connect import maintenance_of
from storage.reembed import STAGING, open_staging, stage
from storage.tables import Tables


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A second model built here: the bundled encoder with a seeded random 384->64 projection."""
    import torch
    from sentence_transformers import SentenceTransformer, models

    torch.manual_seed(7)
    base = SentenceTransformer(bundled_model_path(), device="cpu")
    dense = models.Dense(in_features=384, out_features=64, activation_function=torch.nn.Identity())
    path = tmp_path_factory.mktemp("models") / "tiny-64"
    SentenceTransformer(modules=[base[0], base[1], dense], device="cpu").save(str(path))
    return str(path)


FACTS = [
    "I prefer Python for backend services",
    "My daughter's birthday is on March 3rd",
    "Refunds above 500 euros need two approvals",
    "I am allergic to peanuts",
    "We deploy on Fridays only in emergencies",
]


def test_reembed_catches_up_and_switches(
    make_service: Callable[..., MemoryService], tiny_model: str, ray_session: None
) -> None:
    service = make_service()
    ids = service.add_many("acme", [{"user_id": "u1", "content": f} for f in FACTS]).ids
    settings = service.settings
    job = Reembedding(settings.replace(import_commit_rows=2), tiny_model)
    assert job.snapshot(engine="ray") == 5

    # During the job: recall still answers from the old vectors, and writes keep landing.
    assert service.recall("acme", {"user_id": "u1", "query": "peanut allergy"}).memories[0].content == FACTS[3]
    new_id = service.add("acme", {"user_id": "u1", "content": "I adopted a cat named Miso"})
    service.update(Scope.user("acme", "u1"), ids[0], {"content": "I now prefer Rust for backend services"})
    assert job.switch() == 2

    # The old model is no longer in force: a running service and a fresh open both say so.
    with pytest.raises(ConflictError) as running:
        service.recall("acme", {"user_id": "u1", "query": "cat"})
    assert running.value.code == "embedding_model_mismatch"
    with pytest.raises(ConflictError, match="tiny-64") as reopened:
        LanceStore(settings.storage.uri, embedding_model=service.embedder.name, embedding_dim=384)
    assert reopened.value.code == "embedding_model_mismatch"

    new_embedder = SentenceTransformerEmbedder(tiny_model)
    store = LanceStore(settings.storage.uri, embedding_model=new_embedder.name, embedding_dim=64)
    rows = maintenance_of(store).table("memories").to_arrow().to_pylist()
    assert len(rows) == 6 and {r["id"] for r in rows} == {*ids, new_id}
    expected = new_embedder.embed_batch([r["index_text"] for r in rows])
    assert np.allclose(np.array([r["vector"] for r in rows]), expected, atol=1e-4)
    assert maintenance_of(store).stats()["embedding_model"] == new_embedder.name
    assert maintenance_of(store).table("memories").to_lance().data_storage_version == "2.1"  # the rewrite's format
    with MemoryService(store, new_embedder, settings, defer_access=False) as fresh:
        hits = fresh.recall("acme", {"user_id": "u1", "query": "Miso the cat"}).memories
        assert hits[0].id == new_id
        assert fresh.get(Scope.user("acme", "u1"), ids[0]).content.startswith("I now prefer Rust")


def test_reembed_with_the_model_in_force_embeds_chinese_through_its_gloss(
    make_service: Callable[..., MemoryService],
) -> None:
    # The fixture's embedder reads Chinese as it is written, as a store written with
    # embedding_gloss_chinese off holds it (and records); the settings gloss it (the default for
    # the bundled model): re-embedding with the model in force recomputes every vector.
    service = make_service()
    service.add("acme", {"user_id": "u1", "content": "我老公在银行上班。"})
    oov = maintenance_of(service.store).tables.table("memories").to_lance().to_table(columns=["oov"])
    assert oov.column("oov")[0].as_py() > 0.3
    assert maintenance_of(service.store).chinese_gloss() is False
    report = reembed(service.settings, service.settings.embedding.model, engine="local")
    assert (report["memories"], report["embedded"], report["model"]) == (1, 1, service.embedder.name)
    assert report["chinese_gloss"] == "on"
    oov = maintenance_of(service.store).tables.table("memories").to_lance().to_table(columns=["oov"])
    assert oov.column("oov")[0].as_py() == 0.0
    # The store records it, so a later reindex with the settings' embedder has nothing to do.
    assert maintenance_of(service.store).chinese_gloss()
    reopened = LanceStore(service.settings.storage.uri, embedding_model=None, embedding_dim=None)
    assert maintenance_of(reopened).chinese_gloss() and maintenance_of(reopened).stats()["chinese_gloss"] == "on"


def test_local_reembed_leaves_the_old_setting_refused(
    make_service: Callable[..., MemoryService], tiny_model: str
) -> None:
    service = make_service()
    service.add_many("acme", [{"user_id": "u1", "content": f} for f in FACTS])
    report = reembed(service.settings, tiny_model, engine="local")
    assert (report["memories"], report["embedded"], report["dim"]) == (5, 5, 64)
    # The settings still name the old model: opening the store with them is refused.
    with pytest.raises(ConflictError, match="tiny-64") as refused:
        LanceStore(service.settings.storage.uri, embedding_model=service.embedder.name, embedding_dim=384)
    assert refused.value.code == "embedding_model_mismatch"


@pytest.mark.store  # a LanceDB on a temporary directory
def test_a_staging_table_is_resumed_only_by_a_run_with_the_same_model_and_way_of_embedding_chinese(
    tmp_path: Path,
) -> None:
    tables = Tables(str(tmp_path / "lancedb"), embedding_model="all-MiniLM-L6-v2", embedding_dim=384)

    def staged(model: str, dim: int, gloss: bool) -> tuple[list[str], sc.TableMetadata]:
        table = open_staging(tables, model, dim, gloss)
        return sorted(table.to_arrow().column("id").to_pylist()), sc.TableMetadata.of(table.schema.metadata)

    def left_by(model: str, dim: int, gloss: bool) -> None:
        """A run that staged two vectors and was killed before its switch."""
        table = open_staging(tables, model, dim, gloss)
        stage(table, ["m1", "m2"], ["one", "two"], np.ones((2, dim), dtype=np.float32), [0.0, 0.0])

    left_by("tiny-64", 64, True)
    # The same model, glossing Chinese too: the run resumes, its staged rows kept.
    assert staged("tiny-64", 64, True) == (["m1", "m2"], sc.TableMetadata("tiny-64", 64, 1, True))
    # The other way of embedding Chinese: the staged vectors are of other text, so they go.
    assert staged("tiny-64", 64, False) == ([], sc.TableMetadata("tiny-64", 64, 1, False))
    assert STAGING in tables.db.table_names()
    left_by("tiny-64", 64, False)
    assert staged("tiny-64", 64, False)[0] == ["m1", "m2"]
    # Another model, or the same name at another dimension: replaced too.
    assert staged("other-64", 64, False) == ([], sc.TableMetadata("other-64", 64, 1, False))
    left_by("tiny-64", 64, False)
    assert staged("tiny-64", 32, False) == ([], sc.TableMetadata("tiny-64", 32, 1, False))
