"""What agent developers code against, on the real shared Serve app: /openapi.json types every
answer and error and declares the bearer scheme; /docs and /redoc load with nothing from another
host; `POST /v1/context` keeps its budget over HTTP and through the client, in English and Chinese."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import httpx
import pytest
from agent_memory_http import AsyncMemoryClient, Context, InvalidInputError, MemoryClient
from agent_memory_http.models import ErrorBody
from tokenizers import Tokenizer

SUCCESS = ("200", "201", "202")
UNAUTHENTICATED = {"/healthz", "/readyz"}


@pytest.fixture(scope="module")
def spec(serve_app: dict[str, object]) -> dict[str, Any]:
    return httpx.get(f"{serve_app['url']}/openapi.json", timeout=30).json()


def resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref", "")
    return spec["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else schema


def test_every_operation_has_a_typed_answer_documented_errors_and_the_bearer_scheme(spec: dict[str, Any]) -> None:
    scheme = spec["components"]["securitySchemes"]["apiKey"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    operations = [(path, method, op) for path, ops in spec["paths"].items() for method, op in ops.items()]
    assert len(operations) >= 18
    for path, method, op in operations:
        where = f"{method.upper()} {path}"
        success = [op["responses"][s] for s in SUCCESS if s in op["responses"]]
        assert len(success) == 1, where
        (media, body), = success[0]["content"].items()  # JSON, or JSON lines for an export
        assert media in ("application/json", "application/x-ndjson"), where
        schema = body["schema"]
        assert "$ref" in schema and resolve(spec, schema).get("properties"), f"{where}: untyped answer {schema}"
        # No header parameter stands in for the key; the scheme does.
        assert not [p for p in op.get("parameters", []) if p["name"].lower() == "authorization"], where
        assert all(p.get("description") for p in op.get("parameters", [])), f"{where}: a parameter without description"
        if path in UNAUTHENTICATED:
            continue
        assert op.get("security") == [{"apiKey": []}], where
        for status in ("401", "403", "422", "429", "503"):
            answer = op["responses"][status]
            assert answer["description"] and answer["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"}, f"{where} {status}"
    assert "HTTPValidationError" not in spec["components"]["schemas"]  # FastAPI's shape is not the API's


def test_every_field_of_every_schema_is_described_with_examples_in_both_languages(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    undescribed = [f"{name}.{field}" for name, schema in schemas.items()
                   for field, prop in (schema.get("properties") or {}).items() if not prop.get("description")]
    assert undescribed == []
    for body in ("MemoryIn", "SearchIn", "ConversationIn", "ContextIn"):
        examples = str(schemas[body]["examples"])
        assert re.search(r"[a-zA-Z]{4}", examples) and re.search(r"[\u4e00-\u9fff]", examples), body


def test_an_error_answers_the_documented_body(api) -> None:  # type: ignore[no-untyped-def]
    answer = api().get("/v1/memories/nope", params={"user_id": "u1"})
    assert answer.status_code == 404
    assert ErrorBody.model_validate(answer.json()).error.code == "not_found"


def test_the_docs_pages_need_no_other_host(serve_app: dict[str, object]) -> None:
    base = str(serve_app["url"])
    for page in ("/docs", "/redoc"):
        html = httpx.get(base + page, timeout=30).text
        assert re.findall(r"https?://", html) == [], page
        assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html) + re.findall(r"url: ['\"]([^'\"]+)['\"]", html)
        assert assets, page
        for asset in assets:
            assert asset.startswith("/"), asset
            fetched = httpx.get(base + asset, timeout=30)
            assert fetched.status_code == 200 and fetched.content, asset


# -- POST /v1/context ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(bundled_tokenizer: Tokenizer) -> Tokenizer:
    return bundled_tokenizer


def _log(client: MemoryClient, user: str, session: str, turns: list[tuple[str, str]]) -> None:
    accepted = client.log_conversation(user, session, [{"role": r, "content": c} for r, c in turns], mode="raw")
    assert client.wait_for_job(accepted.job_id, timeout=120).state == "succeeded"


EN = [("user", "My sister Ana lives in Porto and I visit her every spring."), ("assistant", "Porto in spring, lovely.")] + [
    ("user" if i % 2 == 0 else "assistant", f"Turn {i}: hotel option {i} near the river costs {100 + i} euros a night.")
    for i in range(2, 30)
]
ZH = [("user", "我妹妹住在成都，我每年春节都去看她。"), ("assistant", "好的，成都的春节很热闹。")] + [
    ("user" if i % 2 == 0 else "assistant", f"第{i}轮：西湖边的第{i}家酒店每晚{300 + i}元，含早餐。") for i in range(2, 30)
]


@pytest.mark.parametrize(("turns", "question", "language"), [
    (EN, "Where does my sister live?", "en"), (ZH, "我妹妹住在哪里？", "zh"),
], ids=["en", "zh"])
def test_context_over_http_keeps_its_budget(serve_app: dict[str, object], tokenizer: Tokenizer,
                                            turns: list[tuple[str, str]], question: str, language: str) -> None:
    user, session = f"ctx-{uuid.uuid4().hex[:8]}", "s1"
    with MemoryClient(str(serve_app["url"]), "acme-admin", timeout=60) as client:
        _log(client, user, session, turns)
        for budget in (48, 200, 400):
            block = client.context(user, question, session_id=session, max_tokens=budget)
            assert isinstance(block, Context) and block.language == language
            assert len(tokenizer.encode(block.text, add_special_tokens=False).ids) == block.tokens <= budget
        block = client.context(user, question, session_id=session, max_tokens=400)
        assert block.parts.recent[-1].content == turns[-1][1]
        summary = block.parts.summary
        assert summary is not None and summary.first_message_id and summary.turns == len(turns) - len(block.parts.recent)
        assert ("Porto" if language == "en" else "成都") in block.text
        with pytest.raises(InvalidInputError):
            client.context(user, question, max_tokens=10**6)

    async def through_the_async_client() -> Context:
        async with AsyncMemoryClient(str(serve_app["url"]), "acme-admin", timeout=60) as client:
            return await client.context(user, question, session_id=session, max_tokens=200)

    assert asyncio.run(through_the_async_client()).tokens <= 200


def test_context_needs_a_key_and_valid_input(api) -> None:  # type: ignore[no-untyped-def]
    assert api(None).post("/v1/context", json={"user_id": "u", "query": "x"}).status_code == 401
    wrong = api().post("/v1/context", json={"user_id": "u", "query": "x", "max_tokens": 8})
    assert wrong.status_code == 422 and "max_tokens" in wrong.json()["error"]["message"]
