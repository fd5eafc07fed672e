"""The learned decision: whether a candidate states a durable fact about the user, as a calibrated probability.

`DecisionModel` reads the shipped weights (`model.json`, numpy only); `DecidedExtractor` gives the
grammar's candidates the model's probability as their confidence. `train` (run as a script, with
scikit-learn) reproduces the weights; `CARD.md` says what they were trained on and how they measure.
"""

from agent_memory.decision.extractor import DecidedExtractor, proposals, score
from agent_memory.decision.model import BUNDLED, DecisionModel

__all__ = ["BUNDLED", "DecidedExtractor", "DecisionModel", "proposals", "score"]
