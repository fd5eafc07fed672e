"""What the schema metadata of `memories` and of re-embedding's staging table records, decoded in
one place (`storage.schema.TableMetadata`): pure unit tests, no store."""

from __future__ import annotations

import dataclasses

import pytest

from storage import schema as sc
from storage.reembed import staging_schema

# Raw metadata as a schema holds it, and what it decodes to: (model, dim, index_format, chinese_gloss).
CASES = [
    (None, ("", 0, 1, None)),  # a schema without metadata
    ({}, ("", 0, 1, None)),
    ({sc.MODEL_KEY: b"all-MiniLM-L6-v2", sc.DIM_KEY: b"384"}, ("all-MiniLM-L6-v2", 384, 1, None)),  # before layout 2
    ({sc.DIM_KEY: b""}, ("", 0, 1, None)),
    ({sc.INDEX_FORMAT_KEY: b"2"}, ("", 0, 2, None)),
    ({sc.GLOSS_KEY: b"on"}, ("", 0, 1, True)),
    ({sc.GLOSS_KEY: b"off"}, ("", 0, 1, False)),
    ({b"other": b"kept apart"}, ("", 0, 1, None)),
]


@pytest.mark.parametrize(("metadata", "decoded"), CASES)
def test_table_metadata_decodes_each_key_with_its_default(
    metadata: dict[bytes, bytes] | None, decoded: tuple[str, int, int, bool | None]
) -> None:
    read = sc.TableMetadata.of(metadata)
    assert (read.model, read.dim, read.index_format, read.chinese_gloss) == decoded


@pytest.mark.parametrize("gloss", [True, False, None])
def test_table_metadata_reads_back_what_the_memories_schema_records(gloss: bool | None) -> None:
    schema = sc.memories_schema(384, "all-MiniLM-L6-v2", gloss=gloss)
    assert sc.TableMetadata.of(schema.metadata) == sc.TableMetadata("all-MiniLM-L6-v2", 384, sc.INDEX_FORMAT, gloss)
    assert sc.gloss_name(sc.TableMetadata.of(schema.metadata).chinese_gloss) == {True: "on", False: "off", None: None}[gloss]


def test_table_metadata_reads_the_staging_table_too() -> None:
    read = sc.TableMetadata.of(staging_schema(64, "tiny-64", False).metadata)
    assert (read.model, read.dim, read.chinese_gloss) == ("tiny-64", 64, False)
    assert read.index_format == 1  # the staging table records no layout


def test_table_metadata_is_a_value() -> None:
    read = sc.TableMetadata.of(None)
    assert read == sc.TableMetadata() and hash(read) == hash(sc.TableMetadata())
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.dim = 384  # type: ignore[misc]
