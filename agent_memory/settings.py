"""One settings object, grouped by concern, read from `AGENT_MEMORY_*` environment variables or `.env`
once at the edge, then passed down.

Each group (`agent_memory.setting_groups`) reads its own variables; a variable keeps the flat
name it has always had (`AGENT_MEMORY_RECALL_MIN_SCORE` is `settings.recall.min_score`).
`Settings(**flat)` and `settings.replace(**flat)` take those flat names (lower case, without the
prefix), as Serve configs and `.env` files give them; a name that is no setting is refused.
`docs/settings.md` is generated from this module and the groups (`python -m cli.settings_doc`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from agent_memory.setting_groups import (
    BUNDLED_MODEL,
    PREFIX,
    AuthSettings,
    ConsolidationSettings,
    ContextSettings,
    EmbeddingSettings,
    ExtractionSettings,
    Group,
    ImportSettings,
    LimitSettings,
    LLMSettings,
    RecallSettings,
    ServingSettings,
    StorageSettings,
    WriterSettings,
)

__all__ = [
    "BUNDLED_MODEL", "FLAT", "GROUPS", "PREFIX", "Settings", "job_report_dir", "AuthSettings", "ConsolidationSettings",
    "ContextSettings", "EmbeddingSettings", "ExtractionSettings", "ImportSettings", "LimitSettings", "LLMSettings",
    "RecallSettings", "ServingSettings", "StorageSettings", "WriterSettings",
]

GROUPS: dict[str, type[Group]] = {
    "storage": StorageSettings, "embedding": EmbeddingSettings, "llm": LLMSettings,
    "extraction": ExtractionSettings, "auth": AuthSettings, "limits": LimitSettings, "serving": ServingSettings,
    "writer": WriterSettings, "recall": RecallSettings, "consolidation": ConsolidationSettings,
    "imports": ImportSettings, "context": ContextSettings,
}
# flat name -> (group, field)
FLAT: dict[str, tuple[str, str]] = {flat: (group, field) for group, cls in GROUPS.items()
                                    for flat, field in cls.flat_names.items()}


class Settings(BaseModel):
    """Everything configurable about agent-memory, by concern; build it once at the edge and hand it down."""

    model_config = ConfigDict(frozen=True)

    storage: StorageSettings
    embedding: EmbeddingSettings
    llm: LLMSettings
    extraction: ExtractionSettings
    auth: AuthSettings
    limits: LimitSettings
    serving: ServingSettings
    writer: WriterSettings
    recall: RecallSettings
    consolidation: ConsolidationSettings
    imports: ImportSettings
    context: ContextSettings

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        """Flat names (and `_env_file`) to groups; every group reads the environment for the rest."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        env_file = data.pop("_env_file", ".env")
        given: dict[str, dict[str, Any]] = {name: {} for name in GROUPS}
        unknown = []
        for key, value in data.items():
            if key in GROUPS:
                if isinstance(value, Group):
                    given[key] = value.model_dump()
                else:
                    given[key].update(value)
            elif key in FLAT:
                group, field = FLAT[key]
                given[group][field] = value
            else:
                unknown.append(key)
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(sorted(unknown))} (see docs/settings.md for the names)")
        return {name: GROUPS[name](**values, _env_file=env_file) for name, values in given.items()}

    def replace(self, **changes: Any) -> Settings:
        """A copy with some settings changed, by flat name (`storage_uri=...`); validated as at the edge."""
        groups: dict[str, dict[str, Any]] = {name: getattr(self, name).model_dump() for name in GROUPS}
        for key, value in changes.items():
            if key not in FLAT:
                raise ValueError(f"unknown setting: {key}")
            group, field = FLAT[key]
            groups[group][field] = value
        return Settings(**groups, _env_file=None)

    def value(self, name: str) -> Any:
        """One setting's value by its flat name (`recall_min_score`)."""
        if name not in FLAT:
            raise ValueError(f"unknown setting: {name}")
        group, field = FLAT[name]
        return getattr(getattr(self, group), field)

    @classmethod
    def names(cls) -> list[str]:
        """Every setting's flat name (`AGENT_MEMORY_<NAME>`, and the key of a Serve config's args)."""
        return sorted(FLAT)

    @property
    def default_conversation_mode(self) -> Literal["raw", "rules", "llm"]:
        """The extraction mode of a conversation that names none."""
        if self.extraction.conversation_mode is not None:
            return self.extraction.conversation_mode
        return "llm" if self.llm.configured else "rules"


def job_report_dir(settings: Settings) -> Path:
    """Where submitted imports leave their report and rejects: beside a local store, else ./import-reports."""
    uri = settings.storage.uri
    if "://" not in uri or uri.startswith("file://"):
        return Path(uri.removeprefix("file://")).resolve().parent / "import-reports"
    return Path("import-reports").resolve()
