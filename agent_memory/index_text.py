"""The layout of a memory's index text, which search reads: the turns before it (its context, for
keywords only), then the memory with its speaker ("speaker: content"); see docs/data-model.md."""

from __future__ import annotations


def index_text_of(content: str, context: str | None = None, speaker: str | None = None) -> str:
    """A memory's index text: the context (lines of earlier turns), then "speaker: content"."""
    own = f"{speaker}: {content}" if speaker else content
    return f"{context}\n{own}" if context else own


def index_parts(index_text: str, content: str) -> tuple[str | None, str]:
    """(context, the memory with its speaker) of an index text that `index_text_of` wrote.

    The memory's own part is the last line before its content, with the content: a speaker name
    holds no line break. An index text that does not end with the content is all the memory's own.
    """
    if not index_text.endswith(content):
        return None, index_text
    head = index_text[: len(index_text) - len(content)]
    context, _, speaker = head.rpartition("\n")
    return context or None, speaker + content


def index_speaker(index_text: str, content: str) -> str | None:
    """The speaker an index text names for its memory, or None (none, or not `index_text_of`'s layout)."""
    if not index_text.endswith(content):
        return None
    _, own = index_parts(index_text, content)
    head = own[: len(own) - len(content)]
    return head[:-2] if head.endswith(": ") and len(head) > 2 else None


def speaker_name(name: str | None) -> str | None:
    """A speaker's name as index texts hold it: one line, no separator inside."""
    if not name:
        return None
    cleaned = " ".join(name.replace(":", " ").split())
    return cleaned or None
