"""How much hand-written grammar the offline extractor holds: compiled patterns, their alternation
branches, and word lists, per module.

A pattern is every `re.Pattern` reachable from a module's globals (directly, in a rule, a table
entry, a tuple, list or dict), plus every literal pattern a function passes to `re.search`,
`re.match`, `re.sub`, ... A branch is one alternative of an alternation (`a|b|c` is three), counted
on the parsed pattern, nested ones included. A word list is a module-level frozenset, set, tuple or
list of three strings or more.

    python benchmarks/grammar_counts.py [--json]
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

try:  # Python 3.11+
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The modules of the grammar: the extractor's and its decisions' (the per-language tables, where
# there are any, are counted first).
MODULES = (
    "agent_memory.clauses", "agent_memory.rules", "agent_memory.wording", "agent_memory.stance",
    "agent_memory.extraction", "agent_memory.decisions",
)
TABLES = ROOT / "agent_memory" / "grammar"
_RE_CALLS = frozenset({"compile", "search", "match", "fullmatch", "sub", "subn", "split", "findall", "finditer"})


def branches(pattern: str, flags: int = 0) -> int:
    """The alternatives of every alternation in a pattern, nested ones included."""
    count = 0

    def walk(items: Any) -> None:
        nonlocal count
        for op, arg in items:
            name = str(op)
            if name == "BRANCH":
                count += len(arg[1])
                for sub in arg[1]:
                    walk(sub)
            elif name in ("SUBPATTERN",):
                walk(arg[-1])
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                walk(arg[2])
            elif name in ("ASSERT", "ASSERT_NOT"):
                walk(arg[1])
            elif name == "GROUPREF_EXISTS":
                walk(arg[1])
                if arg[2] is not None:
                    walk(arg[2])
            elif name == "ATOMIC_GROUP":
                walk(arg)

    walk(sre_parse.parse(pattern, flags))
    return count


def _patterns_in(value: Any, seen: set[int], depth: int = 0) -> list[re.Pattern[str]]:
    if id(value) in seen or depth > 4:
        return []
    seen.add(id(value))
    if isinstance(value, re.Pattern):
        return [value]
    if isinstance(value, dict):
        return [p for v in value.values() for p in _patterns_in(v, seen, depth + 1)]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [p for v in value for p in _patterns_in(v, seen, depth + 1)]
    if hasattr(value, "__dataclass_fields__") and not inspect.isclass(value):
        return [p for name in value.__dataclass_fields__ for p in _patterns_in(getattr(value, name), seen, depth + 1)]
    return []


def _inline_patterns(path: Path) -> list[str]:
    """Literal patterns passed to `re.<call>` inside functions (not compiled at module level)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef):
            for call in ast.walk(node):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in _RE_CALLS
                        and isinstance(call.func.value, ast.Name) and call.func.value.id == "re" and call.args
                        and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
                    found.append(call.args[0].value)
    return found


def _word_lists(module: Any, imported: set[str]) -> list[int]:
    sizes = []
    for name, value in vars(module).items():
        if name not in imported and isinstance(value, (frozenset, set, tuple, list)) and len(value) >= 3 and all(isinstance(v, str) for v in value):
            sizes.append(len(value))
    return sizes


def _imported_names(path: Path) -> set[str]:
    return {alias.asname or alias.name for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.ImportFrom) for alias in node.names}


def count(module_name: str, claimed: set[int] | None = None) -> dict[str, int]:
    """The patterns, branches and word lists a module defines (not those it imports, nor patterns
    `claimed` by a module counted before: a table's entry another module names again)."""
    claimed = set() if claimed is None else claimed
    module = importlib.import_module(module_name)
    imported = _imported_names(Path(module.__file__ or ""))
    seen: set[int] = set()
    compiled: dict[int, re.Pattern[str]] = {}
    for name, value in vars(module).items():
        if (name.startswith("__") or name in imported or inspect.ismodule(value) or inspect.isfunction(value)
                or inspect.isclass(value)):
            continue
        for pattern in _patterns_in(value, seen):
            if id(pattern) not in claimed:
                compiled.setdefault(id(pattern), pattern)
    claimed.update(compiled)
    own = list(compiled.values())
    inline = _inline_patterns(Path(module.__file__ or ""))
    words = _word_lists(module, imported)
    return {
        "patterns": len(own) + len(inline),
        "branches": sum(branches(p.pattern, p.flags & ~re.UNICODE) for p in own) + sum(branches(p) for p in inline),
        "word_lists": len(words),
        "words": sum(words),
    }


def modules() -> list[str]:
    """The grammar's modules, the per-language tables included where there are any."""
    tables = sorted(f"agent_memory.grammar.{p.stem}" for p in TABLES.glob("*.py") if p.stem != "__init__")
    return [*tables, *MODULES]


def counts() -> dict[str, Any]:
    """Per module, and in all; each pattern counted once, in the first module that holds it."""
    claimed: set[int] = set()
    per = {name: count(name, claimed) for name in modules()}
    total = {key: sum(c[key] for c in per.values()) for key in ("patterns", "branches", "word_lists", "words")}
    return {"modules": per, "total": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    result = counts()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for name, c in [*result["modules"].items(), ("total", result["total"])]:
        print(f"{name:34} {c['patterns']:5} patterns {c['branches']:6} branches {c['word_lists']:4} word lists {c['words']:5} words")


if __name__ == "__main__":
    main()
