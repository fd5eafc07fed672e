"""Train the learned decision from labelled conversations and write `model.json` (scikit-learn, at training only).

    python -m benchmarks.train_decision \
        --msc ../shared/data/msc-dev/dialogues.jsonl --split benchmarks/data/msc/split.json \
        --cases benchmarks/data/extraction/dev.jsonl --cases benchmarks/data/extraction2/dev.jsonl \
        --cases benchmarks/data/extraction3/dev.jsonl --cases benchmarks/data/extraction4/dev.jsonl \
        --out agent_memory/decision/model.json --seed 20261206

Examples are the candidates `decision.extractor.proposals` makes of each dialogue, and the clauses
`decision.extractor.parts` splits them into, each labelled:

- Multi-Session Chat (training dialogues of the split only): positive when the turn carries a fact,
  the candidate shares a content word (stemmed) with it, and the grammar names no one and nothing
  else as the candidate's subject. The project's convention wins over Multi-Session Chat's: a
  remark about the world ("a good movie is always good") or someone else's fact ("my mom is a pole
  dancer") is a negative here, whatever its label there.
- the project's extraction sets (dev halves only): positive when it states an expected fact (or an
  old fact a change of mind later replaces) and no forbidden one, negative otherwise; weighted
  `--project-weight` times a Multi-Session Chat example, so that where the two disagree the
  project's labels win.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.clauses import subject
from agent_memory.decision.extractor import parts, proposals
from agent_memory.decision.features import SIGNALS, Context, contexts, embedded_text, signals
from agent_memory.decision.model import DecisionModel, Head
from agent_memory.evaluation import fact_matches, load_extraction_cases, load_fact_dialogues
from agent_memory.models import MessageRecord
from agent_memory.rules import ProposedMemory, RulesExtractor
from agent_memory.text import is_chinese, stem_words, terms


@dataclass
class Examples:
    """Candidates as rows: signals, text to embed, label, weight, and where each came from."""

    signals: list[list[float]] = field(default_factory=list)
    texts: list[str | None] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)  # the dialogue: folds never split one
    turns: list[str] = field(default_factory=list)  # the user turn, for turn-level figures
    turn_facts: list[bool] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)  # msc, en, zh
    contents: list[str] = field(default_factory=list)
    previous: list[str] = field(default_factory=list)  # what the assistant said before the turn
    turn_texts: list[str] = field(default_factory=list)

    def add(self, candidate: ProposedMemory, context: Context, label: int, weight: float, group: str, turn_fact: bool,
            origin: str) -> None:
        self.signals.append(signals(candidate, context))
        self.previous.append(context.previous)
        self.turn_texts.append(context.turn)
        self.texts.append(embedded_text(candidate.content))
        self.labels.append(label)
        self.weights.append(weight)
        self.groups.append(group)
        self.turns.append(f"{group}/{candidate.message.message_id}")
        self.turn_facts.append(turn_fact)
        self.origins.append(origin)
        self.contents.append(candidate.content)


def records(dialogue_id: str, turns: Sequence[dict[str, Any]]) -> list[MessageRecord]:
    """A dialogue's turns as logged messages, a minute apart."""
    base = datetime(2025, 1, 1, tzinfo=timezone.utc)
    return [MessageRecord(id=f"{dialogue_id}:t{i}", org_id="train", user_id=dialogue_id, session_id="s1",
                          message_id=f"t{i}", role=t["role"], content=t["content"], created_at=base + timedelta(minutes=i))
            for i, t in enumerate(turns)]


def _content_words(text: str) -> set[str]:
    return set(stem_words(terms(text)))


def speaks_of_user(text: str) -> bool:
    """Whether a candidate may say something of the user: the grammar names no one and nothing else
    as its subject ("my mom is a pole dancer", "a good movie is always good" do)."""
    return subject(text, is_chinese(text)) != "other"


def msc_label(candidate: ProposedMemory, fact: str) -> int:
    """A Multi-Session Chat candidate's label, the project's convention applied (see the module)."""
    if not fact.strip() or not speaks_of_user(candidate.content):
        return 0
    return int(bool(_content_words(candidate.content) & _content_words(fact)))


def project_label(candidate: ProposedMemory, case: dict[str, Any]) -> int:
    """A project set's candidate label: it states an expected (or later replaced) fact and no forbidden one."""
    content = candidate.content
    if any(fact_matches(f, content) for f in case.get("forbidden", [])):
        return 0
    return int(any(fact_matches(f, content) for f in [*case.get("expected", []), *case.get("superseded", [])]))


def build_examples(msc: Iterable[dict[str, Any]], cases: Iterable[dict[str, Any]], *, project_weight: float) -> Examples:
    """Every candidate of every dialogue, labelled."""
    rules = RulesExtractor()
    out = Examples()
    for dialogue in msc:
        messages = records(dialogue["id"], dialogue["turns"])
        facts = {m.message_id: t.get("fact", "") for m, t in zip(messages, dialogue["turns"], strict=True)}
        where = contexts(messages)
        for c in (c for proposed in proposals(messages, rules) for c in (proposed, *parts(proposed))):
            fact = facts[c.message.message_id]
            out.add(c, where[c.message.message_id], msc_label(c, fact), 1.0, f"msc/{dialogue['id']}",
                    bool(fact.strip()), "msc")
    for case in cases:
        turns = case["messages"]
        messages = records(str(case["id"]), turns)
        where = contexts(messages)
        for c in (c for proposed in proposals(messages, rules) for c in (proposed, *parts(proposed))):
            label = project_label(c, case)
            out.add(c, where[c.message.message_id], label, project_weight, f"case/{case['id']}",
                    bool(case.get("expected")), str(case.get("lang") or "en"))
    return out


def embed(texts: Sequence[str | None], cache: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """Vectors of the readable texts (zeros elsewhere) with the bundled model, cached by text."""
    from agent_memory.embedding import SentenceTransformerEmbedder

    stored: dict[str, np.ndarray] = {}
    if cache is not None and cache.exists():
        with np.load(cache) as data:
            stored = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))

    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    missing = sorted({t for t in texts if t is not None and key(t) not in stored})
    if missing:
        embedder = SentenceTransformerEmbedder()
        for start in range(0, len(missing), 256):
            chunk = missing[start:start + 256]
            for text, vector in zip(chunk, embedder.embed_batch(chunk), strict=True):
                stored[key(text)] = vector
        if cache is not None:
            keys = sorted(stored)
            np.savez(cache, keys=np.asarray(keys), vectors=np.stack([stored[k] for k in keys]))
    dim = len(next(iter(stored.values()))) if stored else 384
    vectors = np.zeros((len(texts), dim), dtype=np.float32)
    readable = np.zeros(len(texts), dtype=bool)
    for i, text in enumerate(texts):
        if text is not None:
            vectors[i], readable[i] = stored[key(text)], True
    return vectors, readable


def fit_head(x: np.ndarray, y: np.ndarray, w: np.ndarray, *, hidden: int, c: float, seed: int,
             boost: np.ndarray | None = None) -> Head:
    """Logistic regression (hidden 0) or a one-hidden-layer MLP, on standardised inputs; `boost`
    multiplies some standardised inputs, which regularisation then holds back less."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-6] = 1.0
    if boost is not None:
        scale = scale / boost
    z = (x - mean) / scale
    if hidden:
        mlp = MLPClassifier(hidden_layer_sizes=(hidden,), alpha=1.0 / c, max_iter=400, early_stopping=False,
                            random_state=seed)
        # MLPClassifier takes no sample weights before scikit-learn 1.7; repeat rows by weight instead.
        repeat = np.maximum(np.rint(w / w.min()).astype(int), 1)
        mlp.fit(np.repeat(z, repeat, axis=0), np.repeat(y, repeat))
        layers = tuple((np.asarray(wt, dtype=np.float32), np.asarray(b, dtype=np.float32))
                       for wt, b in zip(mlp.coefs_, mlp.intercepts_, strict=True))
    else:
        lr = LogisticRegression(C=c, max_iter=3000, random_state=seed)
        lr.fit(z, y, sample_weight=w)
        layers = ((lr.coef_.T.astype(np.float32), lr.intercept_.astype(np.float32)),)
    return Head(mean.astype(np.float32), scale.astype(np.float32), layers, (1.0, 0.0))


def platt(logits: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Calibration a·z + b fitted on out-of-fold scores."""
    from sklearn.linear_model import LogisticRegression

    lr = LogisticRegression(C=1e6, max_iter=1000)
    lr.fit(logits.reshape(-1, 1), y, sample_weight=w)
    return float(lr.coef_[0, 0]), float(lr.intercept_[0])


def out_of_fold(x: np.ndarray, y: np.ndarray, w: np.ndarray, groups: Sequence[str], *, folds: int, hidden: int, c: float,
                seed: int, boost: np.ndarray | None = None) -> np.ndarray:
    """Uncalibrated scores of every row from a head that did not see its dialogue."""
    from sklearn.model_selection import GroupKFold

    out = np.zeros(len(y))
    for fit, held in GroupKFold(n_splits=folds, shuffle=True, random_state=seed).split(x, y, groups):
        out[held] = fit_head(x[fit], y[fit], w[fit], hidden=hidden, c=c, seed=seed, boost=boost).logits(x[held])
    return out


def reliability(p: np.ndarray, y: np.ndarray, w: np.ndarray, bins: int = 5) -> list[dict[str, float]]:
    """Out-of-fold probabilities against what was observed, by bins of probability (weighted)."""
    out = []
    for low in np.linspace(0.0, 1.0, bins, endpoint=False):
        inside = (p >= low) & (p < low + 1.0 / bins + (1e-9 if low + 1.0 / bins >= 1.0 else 0.0))
        if inside.any():
            out.append({"from": round(float(low), 2), "mean_p": round(float(np.average(p[inside], weights=w[inside])), 3),
                        "observed": round(float(np.average(y[inside], weights=w[inside])), 3), "n": int(inside.sum())})
    return out


def turn_figures(p: np.ndarray, examples: Examples, threshold: float, origin: str = "msc") -> dict[str, float]:
    """Turn-level precision and recall at a threshold, as the benchmark counts them (no store)."""
    yielded: dict[str, bool] = {}
    fact: dict[str, bool] = {}
    for i, turn in enumerate(examples.turns):
        if examples.origins[i] != origin:
            continue
        yielded[turn] = yielded.get(turn, False) or p[i] >= threshold
        fact[turn] = examples.turn_facts[i]
    made = [t for t in yielded if yielded[t]]
    correct = sum(fact[t] for t in made)
    return {"precision": round(correct / len(made), 4) if made else 1.0,
            "yielded_fact_turns": correct, "yielded": len(made)}


@dataclass(frozen=True)
class Options:
    """How a model is trained (the card records them)."""

    seed: int = 20261206
    project_weight: float = 3.0
    hidden: int = 0
    c: float = 0.01
    signals_c: float = 0.3
    threshold: float = 0.6
    folds: int = 5
    # How much more the grammar's signals count than the embedding's dimensions in the text head.
    signal_boost: float = 1.0


def train(msc: Sequence[dict[str, Any]], cases: Sequence[dict[str, Any]], options: Options,
          cache: Path | None = None) -> DecisionModel:
    """Both heads, each calibrated on its out-of-fold scores (folds by dialogue)."""
    examples = build_examples(msc, cases, project_weight=options.project_weight)
    sig = np.asarray(examples.signals, dtype=np.float32)
    vectors, readable = embed(examples.texts, cache)
    y = np.asarray(examples.labels)
    w = np.asarray(examples.weights)
    heads: dict[str, Head] = {}
    figures: dict[str, Any] = {}
    text_boost = np.concatenate([np.ones(vectors.shape[1]), np.full(sig.shape[1], options.signal_boost)])
    for name, x, rows, hidden, c, boost in (
        ("text", np.hstack([vectors, sig]), readable, options.hidden, options.c, text_boost),
        ("signals", sig, np.ones(len(y), dtype=bool), 0, options.signals_c, None),
    ):
        groups = [g for g, r in zip(examples.groups, rows, strict=True) if r]
        oof = out_of_fold(x[rows], y[rows], w[rows], groups, folds=options.folds, hidden=hidden, c=c, seed=options.seed,
                          boost=boost)
        a, b = platt(oof, y[rows], w[rows])
        head = fit_head(x[rows], y[rows], w[rows], hidden=hidden, c=c, seed=options.seed, boost=boost)
        heads[name] = Head(head.mean, head.scale, head.layers, (round(a, 6), round(b, 6)))
        p = np.zeros(len(y))
        p[rows] = 1.0 / (1.0 + np.exp(-(a * oof + b)))
        figures[name] = {"examples": int(rows.sum()), "positives": int(y[rows].sum()),
                         "reliability": reliability(p[rows], y[rows], w[rows]),
                         "msc_turns_out_of_fold": {str(t): turn_figures(np.where(rows, p, 0.0), examples, t)
                                                   for t in (0.5, 0.6, 0.7, 0.8)}}
    card = {**asdict(options), "msc_dialogues": len(msc), "project_dialogues": len(cases), "examples": len(y),
            "positives": int(y.sum()), "out_of_fold": figures}
    return DecisionModel(SIGNALS, "all-MiniLM-L6-v2", heads, options.threshold, card)


def main() -> None:
    defaults = Options()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--msc", required=True, help="dialogues.jsonl shaped like msc-dev")
    parser.add_argument("--split", required=True, help="split.json: its held-out ids are never trained on")
    parser.add_argument("--cases", action="append", default=[], help="a project extraction set's dev half (repeatable)")
    parser.add_argument("--out", required=True, help="where to write model.json")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--project-weight", type=float, default=defaults.project_weight)
    parser.add_argument("--hidden", type=int, default=defaults.hidden, help="hidden units of the text head (0: logistic regression)")
    parser.add_argument("--c", type=float, default=defaults.c, help="inverse regularisation of the text head")
    parser.add_argument("--signals-c", type=float, default=defaults.signals_c, help="inverse regularisation of the signals head")
    parser.add_argument("--threshold", type=float, default=defaults.threshold, help="the operating point the card recommends")
    parser.add_argument("--folds", type=int, default=defaults.folds)
    parser.add_argument("--cache", default=None, help="an .npz file caching the embeddings (outside the repository)")
    args = parser.parse_args()

    heldout = set(json.loads(Path(args.split).read_text())["heldout"])
    msc = [d for d in load_fact_dialogues(args.msc) if d["id"] not in heldout]
    cases = [case for path in args.cases for case in load_extraction_cases(path)]
    options = Options(seed=args.seed, project_weight=args.project_weight, hidden=args.hidden, c=args.c,
                      signals_c=args.signals_c, threshold=args.threshold, folds=args.folds)
    model = train(msc, cases, options, Path(args.cache) if args.cache else None)
    model.save(args.out)
    print(json.dumps(model.card, indent=1))


if __name__ == "__main__":
    main()
