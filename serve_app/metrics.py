"""Our own metrics, exported with Ray's (Prometheus format on each node's metrics port); each is made
in a replica, where Ray is loaded, so importing this module does not import Ray."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray.util import metrics

_LATENCY_MS = [1, 2, 5, 10, 15, 20, 30, 40, 60, 80, 120, 200, 400, 1000, 3000]
_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def recall_latency() -> metrics.Histogram:
    """Whole recall latency inside the ingress replica, in milliseconds."""
    from ray.util import metrics

    return metrics.Histogram(
        "agent_memory_recall_latency_ms", description="Recall latency (ms)", boundaries=_LATENCY_MS,
        tag_keys=("degraded",),
    )


def writes() -> metrics.Counter:
    """Memories committed by the writer."""
    from ray.util import metrics

    return metrics.Counter("agent_memory_writes_total", description="Memories committed")


def commit_rows() -> metrics.Histogram:
    """Rows per writer commit (how well concurrent writes coalesce)."""
    from ray.util import metrics

    return metrics.Histogram("agent_memory_commit_rows", description="Rows per commit", boundaries=_SIZES)


def embed_batch_size() -> metrics.Histogram:
    """Texts per embedding model call: `path` is `embedder` (the Embedder deployment) or `query`
    (an ingress replica's own model)."""
    from ray.util import metrics

    return metrics.Histogram(
        "agent_memory_embed_batch_size", description="Texts per model call", boundaries=_SIZES, tag_keys=("path",)
    )


def requests() -> metrics.Counter:
    """HTTP requests by route and status."""
    from ray.util import metrics

    return metrics.Counter(
        "agent_memory_http_requests_total", description="HTTP requests", tag_keys=("route", "status")
    )


def commit_retries() -> metrics.Gauge:
    """Commit conflicts retried by the store (cumulative, per replica)."""
    from ray.util import metrics

    return metrics.Gauge("agent_memory_commit_retries", description="Commit conflicts retried")
