"""`docs/settings.md`, generated from `Settings`: every setting, by group, with its variable,
default and meaning. `python -m cli.settings_doc > docs/settings.md`; a test fails when it is stale."""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from agent_memory.settings import GROUPS, PREFIX, Settings

HEADER = """# Settings

Every setting is read from an environment variable (or a `.env` file in the working directory)
when a process starts: the CLI, `agent-memory serve`, each Serve replica and each job. A Serve
config's `args` (`cluster/serve_config.yaml`) take the same names in lower case without the
prefix, and an unknown name is refused. In code, settings are grouped by concern:
`Settings().recall.min_score` is `AGENT_MEMORY_RECALL_MIN_SCORE`.

This page is generated from `agent_memory/settings.py` (`python -m cli.settings_doc > docs/settings.md`).
Back to the [README](../README.md).
"""


def default_text(info: FieldInfo) -> str:
    """The default as a reader would write it."""
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "(required)"
    else:
        value = info.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def render() -> str:
    """The whole page."""
    out = [HEADER]
    for group, cls in GROUPS.items():
        out.append(f"## `{group}`: {(cls.__doc__ or '').strip()}\n")
        out.append("| Variable | In code | Default | What it does |")
        out.append("| --- | --- | --- | --- |")
        flat_of = {field: flat for flat, field in cls.flat_names.items()}
        for name, info in cls.model_fields.items():
            variable = PREFIX + flat_of[name].upper()
            meaning = (info.description or "").replace("|", "\\|")
            out.append(f"| `{variable}` | `{group}.{name}` | {default_text(info)} | {meaning} |")
        out.append("")
    out.append(f"{len(Settings.names())} settings in all.\n")
    return "\n".join(out)


def main() -> int:
    """Print the page."""
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
