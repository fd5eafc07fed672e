"""The learned decision's weights, read from plain JSON and run with numpy alone.

A model is one or two heads, each a small feed-forward network (no hidden layer: logistic
regression) over standardised inputs, followed by Platt scaling (a·z + b) so that its output is a
calibrated probability that a candidate states a durable fact about the user:

- `text`: the embedding of the candidate's text followed by its signals (English, and Chinese once
  a gloss into English is embedded for it);
- `signals`: the signals alone (text the embedding model cannot read).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.errors import InvalidInputError

BUNDLED = Path(__file__).resolve().parent / "model.json"
FORMAT = "agent-memory-decision/1"


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


@dataclass(frozen=True)
class Head:
    """One network: standardisation, layers (ReLU between them), then calibration."""

    mean: np.ndarray
    scale: np.ndarray
    layers: tuple[tuple[np.ndarray, np.ndarray], ...]
    calibration: tuple[float, float]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Head:
        layers = tuple((np.asarray(layer["weights"], dtype=np.float32), np.asarray(layer["bias"], dtype=np.float32))
                       for layer in data["layers"])
        a, b = data.get("calibration", (1.0, 0.0))
        return cls(np.asarray(data["mean"], dtype=np.float32), np.asarray(data["scale"], dtype=np.float32), layers,
                   (float(a), float(b)))

    def to_dict(self) -> dict[str, Any]:
        return {"mean": _rounded(self.mean), "scale": _rounded(self.scale),
                "layers": [{"weights": _rounded(w), "bias": _rounded(b)} for w, b in self.layers],
                "calibration": list(self.calibration)}

    @property
    def inputs(self) -> int:
        return int(self.mean.shape[0])

    def logits(self, x: np.ndarray) -> np.ndarray:
        """The uncalibrated score of each row of `x` (n, inputs)."""
        h = (np.asarray(x, dtype=np.float32) - self.mean) / self.scale
        for i, (weights, bias) in enumerate(self.layers):
            h = h @ weights + bias
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        return h[:, 0]

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        a, b = self.calibration
        return _sigmoid(a * self.logits(x) + b)


def _rounded(array: np.ndarray) -> list[Any]:
    return np.round(np.asarray(array, dtype=np.float64), 6).tolist()


@dataclass(frozen=True)
class DecisionModel:
    """The heads, the signal names they were trained on, and the threshold the card recommends."""

    signals: tuple[str, ...]
    embedding_model: str
    heads: dict[str, Head]
    threshold: float
    card: dict[str, Any]

    @classmethod
    def load(cls, path: str | Path = BUNDLED) -> DecisionModel:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise InvalidInputError(f"{path}: not a decision model ({FORMAT})")
        return cls(tuple(data["signals"]), str(data["embedding_model"]),
                   {name: Head.from_dict(head) for name, head in data["heads"].items()},
                   float(data["threshold"]), dict(data.get("card", {})))

    def save(self, path: str | Path) -> None:
        data = {"format": FORMAT, "signals": list(self.signals), "embedding_model": self.embedding_model,
                "threshold": self.threshold, "card": self.card,
                "heads": {name: head.to_dict() for name, head in self.heads.items()}}
        Path(path).write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")

    def probabilities(self, signals: np.ndarray, vectors: np.ndarray | None, readable: np.ndarray) -> np.ndarray:
        """P(durable fact) per candidate: the text head where its text was embedded (`readable`),
        the signals head elsewhere."""
        signals = np.asarray(signals, dtype=np.float32)
        out = np.zeros(len(signals), dtype=np.float64)
        readable = np.asarray(readable, dtype=bool)
        if readable.any() and vectors is not None and "text" in self.heads:
            out[readable] = self.heads["text"].probabilities(np.hstack([vectors[readable], signals[readable]]))
        rest = ~readable if "text" in self.heads and vectors is not None else np.ones(len(signals), dtype=bool)
        if rest.any():
            out[rest] = self.heads["signals"].probabilities(signals[rest])
        return out
