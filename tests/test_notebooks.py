"""The analytics notebooks run headless on a small scratch store, write their figures, and leave
nothing behind: not in the working tree, not in the temporary directory."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from agent_memory import Settings, open_service
from agent_memory.embedding import Embedder

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
# Each notebook, the prefix of its scratch directory and the figures it writes.
FIGURES = {
    "memory_analytics.ipynb": ("memory-analytics-", [
        "memories_by_type", "memories_by_user", "memories_by_month", "importance_and_access", "near_duplicates",
        "consolidation",
    ]),
    "recall_quality.ipynb": ("recall-quality-", ["recall_at_k", "fusion_weights", "recency_half_life"]),
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A drawn chart is tens of KB; an empty canvas or a failed save is far smaller.
MIN_FIGURE_BYTES = 8_000


def _tree() -> dict[str, tuple[int, int]]:
    """Everything under notebooks/ (with sizes and mtimes) and every name at the repository root."""
    files = {str(p.relative_to(ROOT)): (p.stat().st_size, p.stat().st_mtime_ns) for p in NOTEBOOKS.rglob("*")}
    return {**files, **{p.name: (0, 0) for p in ROOT.iterdir()}}


def _execute(name: str) -> nbformat.NotebookNode:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return notebook


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The kernel's environment: its own temporary directory, a store path that does not exist, no network."""
    kernel_tmp = tmp_path / "tmp"
    kernel_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(kernel_tmp))
    monkeypatch.setenv("AGENT_MEMORY_STORAGE_URI", str(tmp_path / "store"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("AGENT_MEMORY_FIGURES_DIR", raising=False)
    return kernel_tmp


def test_every_notebook_is_tested_and_stored_without_outputs() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(FIGURES)
    for name in FIGURES:
        cells = nbformat.read(NOTEBOOKS / name, as_version=4).cells
        assert [c for c in cells if c.cell_type == "code" and (c.outputs or c.execution_count)] == [], name


def test_figures_go_to_a_folder_git_ignores_unless_told_otherwise() -> None:
    """`jupyter execute` keeps no outputs: by default the figures are files in notebooks/figures/."""
    for name in FIGURES:
        parameters = nbformat.read(NOTEBOOKS / name, as_version=4).cells[1].source
        assert 'FIGURES_DIR = os.environ.get("AGENT_MEMORY_FIGURES_DIR", "figures")' in parameters, name
    assert "/notebooks/figures/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert "notebooks/figures/" in (NOTEBOOKS / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(FIGURES))
@pytest.mark.store  # the kernel builds a scratch store
def test_notebook_runs_writes_its_figures_and_leaves_nothing(
    name: str, kernel_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    figures = tmp_path / "figures"
    monkeypatch.setenv("AGENT_MEMORY_FIGURES_DIR", str(figures))
    prefix, expected = FIGURES[name]
    before = _tree()

    notebook = _execute(name)

    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert sum(o.get("output_type") == "display_data" and "image/png" in o.get("data", {}) for o in outputs) >= len(expected)
    for figure in expected:
        data = (figures / f"{figure}.png").read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > MIN_FIGURE_BYTES, figure
    assert sorted(p.stem for p in figures.iterdir()) == sorted(expected)
    # The configured store was missing: the notebook worked on a scratch store and created nothing there.
    assert not (tmp_path / "store").exists()
    assert not [p.name for p in kernel_env.iterdir() if p.name.startswith(prefix)]
    assert _tree() == before


@pytest.mark.store
def test_a_notebook_that_fails_still_removes_its_scratch_directory(kernel_env: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALL_QUESTIONS", str(kernel_env / "no-such-questions.jsonl"))
    before = _tree()  # with the default figures folder: it is created at the first figure, never here
    with pytest.raises(CellExecutionError, match="no-such-questions"):
        _execute("recall_quality.ipynb")
    assert not [p.name for p in kernel_env.iterdir() if p.name.startswith("recall-quality-")]
    assert _tree() == before


def test_memory_analytics_works_on_a_copy_of_the_configured_store(kernel_env: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  embedder: Embedder) -> None:
    store = tmp_path / "store"
    settings = Settings(_env_file=None, storage_uri=str(store))  # type: ignore[call-arg]
    # The session's bundled model (the one these settings name), not a second load of it.
    with open_service(settings, embedder=embedder) as service:
        service.add_many("acme", [
            {"user_id": "alice", "content": "My dog is called Max", "importance": 0.9, "created_at": "2025-01-05T10:00:00Z"},
            {"user_id": "alice", "content": "My dog is named Max", "created_at": "2025-02-05T10:00:00Z"},
            {"user_id": "alice", "content": "Always answer in bullet points", "memory_type": "procedural"},
            {"user_id": "bob", "content": "I live in Lisbon", "created_at": "2024-12-24T09:00:00Z"},
            {"user_id": "bob", "content": "我不吃辣", "memory_type": "semantic"},
            {"user_id": "bob", "content": "Flew to Tokyo for the offsite", "memory_type": "episodic"},
        ])
        service.recall("acme", {"user_id": "bob", "query": "Where does Bob live?"})
    files = {p: p.stat().st_mtime_ns for p in store.rglob("*")}
    figures = tmp_path / "figures"
    monkeypatch.setenv("AGENT_MEMORY_STORAGE_URI", str(store))
    monkeypatch.setenv("AGENT_MEMORY_FIGURES_DIR", str(figures))

    notebook = _execute("memory_analytics.ipynb")

    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "a copy of" in text and "6 memories" in text
    assert sorted(p.stem for p in figures.iterdir()) == sorted(FIGURES["memory_analytics.ipynb"][1])
    # The store it named is read, never written: the run and its consolidation went to the copy.
    assert {p: p.stat().st_mtime_ns for p in store.rglob("*")} == files
    assert not [p.name for p in kernel_env.iterdir() if p.name.startswith("memory-analytics-")]
