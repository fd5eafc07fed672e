"""Generated requests (schemathesis) against every endpoint of the live app on loopback.

Whatever is sent, the answer is never a 5xx, every error is a status docs/api.md lists in the one
JSON shape `{"error": {"code", "message"}}`, and every success conforms to the response schema the
app publishes. Cases are derandomized, so a run is reproducible. In the suite, 14 cases per
operation (about 200 in all); `make fuzz` raises `FUZZ_EXAMPLES` and adds the coverage phase's
boundary cases and unexpected methods (`FUZZ_COVERAGE=1`), for over 1,000.

The key is `globex-admin` (the shared keys file has no org of its own for fuzzing), so every
endpoint is reachable; destructive calls only ever name throwaway users: generated ids, given a
`fuzz-` prefix where they would be valid, so they never name a user another test wrote.
"""

from __future__ import annotations

import collections
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from agent_memory.models import MAX_ID_CHARS

FUZZ_KEY = "globex-admin"
# Generated cases per operation (positive and negative together), and whether to add the coverage
# phase's boundary cases and unexpected methods (several hundred more): `make fuzz` sets both.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "14"))
COVERAGE = os.environ.get("FUZZ_COVERAGE", "0") == "1"
# User ids the destructive calls may name: generated ones, made throwaway by this prefix.
THROWAWAY = "fuzz-"
DESTRUCTIVE = {"DELETE /v1/users/{user_id}", "DELETE /v1/memories/{memory_id}", "PATCH /v1/memories/{memory_id}",
               "POST /v1/memories/{memory_id}/restore"}

# The error statuses docs/api.md lists (5xx are failures of their own).
DOCUMENTED_ERRORS = {401, 403, 404, 405, 409, 413, 415, 422, 429}

# What ran, for the summary at the end of the module: cases per operation and statuses.
RAN: collections.Counter[tuple[str, int]] = collections.Counter()
JOBS: list[str] = []


@pytest.fixture(scope="module")
def fuzz_schema(serve_app: dict[str, Any], request: pytest.FixtureRequest) -> Iterator[schemathesis.BaseSchema]:
    """The live app's own OpenAPI document, every request sent with the fuzz key."""
    url = str(serve_app["url"])
    config = schemathesis.Config.from_dict({
        "seed": 20261202,
        "base-url": url,
        "headers": {"Authorization": f"Bearer {FUZZ_KEY}"},
        "generation": {"mode": "all", "max-examples": EXAMPLES, "deterministic": True, "allow-x00": True},
        "phases": {"examples": {"enabled": True}, "fuzzing": {"enabled": True}, "coverage": {"enabled": COVERAGE}},
        "request-timeout": 120,
    })
    yield schemathesis.openapi.from_url(f"{url}/openapi.json", config=config)
    unfinished = _settle_jobs(url)
    _report(request, unfinished)


schema = schemathesis.pytest.from_fixture("fuzz_schema")


@pytest.fixture(autouse=True)
def _node_id(request: pytest.FixtureRequest) -> None:
    """Schemathesis' lazy schemas read `node._nodeid`, which pytest 9.2 nodes no longer have."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


def _throwaway(value: Any) -> Any:
    """A generated user id that would be valid, prefixed so that it names nobody real."""
    if isinstance(value, str) and value.strip() and "\x00" not in value and len(value) <= MAX_ID_CHARS:
        return THROWAWAY + value
    return value


def _keep_destructive_calls_throwaway(case: schemathesis.Case) -> None:
    label = f"{case.method.upper()} {case.path}"
    if label not in DESTRUCTIVE:
        return
    if case.path_parameters and "user_id" in case.path_parameters:
        case.path_parameters["user_id"] = _throwaway(case.path_parameters["user_id"])
    if case.query and "user_id" in case.query:
        case.query["user_id"] = _throwaway(case.query["user_id"])


def documented_answer(ctx: Any, response: schemathesis.Response, case: schemathesis.Case) -> bool | None:
    """Every 4xx is one docs/api.md lists, as `{"error": {"code", "message"}}` (429s with
    `retry_after_s` too); every 2xx a JSON object that conforms to the published response schema
    (an export's JSON lines: each line an object)."""
    media = response.headers.get("content-type") or [""]  # schemathesis keeps every value of a header
    if response.status_code < 400 and str(media[0] if isinstance(media, list) else media).startswith("application/x-ndjson"):
        lines = [json.loads(line) for line in response.text.splitlines() if line.strip()]
        assert lines and all(isinstance(line, dict) and "kind" in line for line in lines), response.text[:300]
        return None
    body = response.json()
    if response.status_code >= 400:
        assert response.status_code in DOCUMENTED_ERRORS, (
            f"{response.status_code} is not a status docs/api.md lists: {response.text[:300]}")
        assert isinstance(body, dict) and set(body) == {"error"}, f"not the error shape: {response.text[:300]}"
        error = body["error"]
        extra = {"retry_after_s"} if response.status_code == 429 else set()
        assert set(error) == {"code", "message"} | extra, f"error fields: {sorted(error)}"
        assert isinstance(error["code"], str) and error["code"], response.text[:300]
        assert isinstance(error["message"], str) and error["message"], response.text[:300]
        return None
    assert isinstance(body, dict), f"a success that is not a JSON object: {response.text[:300]}"
    return response_schema_conformance(ctx, response, case)


@schema.parametrize()
@settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_generated_requests(case: schemathesis.Case) -> None:
    _keep_destructive_calls_throwaway(case)
    response = case.call()
    RAN[(f"{case.method.upper()} {case.path}", response.status_code)] += 1
    if response.status_code == 202 and isinstance(body := _json(response), dict) and "job_id" in body:
        JOBS.append(body["job_id"])
    case.validate_response(response, checks=[not_a_server_error, documented_answer])


def _json(response: schemathesis.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _settle_jobs(url: str, timeout_s: float = 300) -> dict[str, str]:
    """Wait for the jobs the fuzzing started (consolidations, erasures, extractions) to finish, so
    that they do not run on into the next module's tests; the states of those that did not."""
    deadline = time.monotonic() + timeout_s
    pending: dict[str, str] = dict.fromkeys(JOBS, "queued")
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {FUZZ_KEY}"}, timeout=30) as client:
        while pending and time.monotonic() < deadline:
            for job_id in list(pending):
                job = client.get(f"/v1/jobs/{job_id}")
                state = job.json()["state"] if job.status_code == 200 else str(job.status_code)
                if state in ("succeeded", "failed"):
                    del pending[job_id]
                else:
                    pending[job_id] = state
            time.sleep(0.5)
    return pending


def _report(request: pytest.FixtureRequest, unfinished: dict[str, str]) -> None:
    """Cases per operation and their statuses, on the terminal (outside pytest's capture)."""
    by_operation: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for (label, status), n in RAN.items():
        by_operation[label][status] += n
    left = collections.Counter(f"{job.split('-')[0] if '-' in job else 'job'} {state}" for job, state in unfinished.items())
    lines = [f"fuzz: {sum(RAN.values())} generated cases over {len(by_operation)} operations; "
             f"{len(JOBS)} jobs started, not finished: {dict(left) or 'none'}"]
    lines += [f"  {label}: {sum(s.values())} {dict(sorted(s.items()))}" for label, s in sorted(by_operation.items())]
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for line in lines:
            reporter.write_line(line)


# Found by `make fuzz` (POST /v1/memories/search with `until: "0399-06-26T18:39:25.0-21:13"`): a
# timestamp before the year 1000, or one whose UTC time falls outside the years 1..9999, was a 500.
# The first is a filter on the store like any other; the second is 422 `invalid_input`.
OUT_OF_RANGE = [
    ("/v1/memories/search", {"user_id": "fuzz-dates", "query": "x", "until": "0399-06-26T18:39:25Z"}, 200),
    ("/v1/memories/search", {"user_id": "fuzz-dates", "query": "x", "since": "0999-12-31T00:00:00Z"}, 200),
    ("/v1/memories/search", {"user_id": "fuzz-dates", "query": "x", "until": "9999-12-31T23:59:59.999999Z"}, 200),
    ("/v1/memories/search", {"user_id": "fuzz-dates", "query": "x", "until": "9999-12-31T23:59:59-01:00"}, 422),
    ("/v1/memories", {"user_id": "fuzz-dates", "content": "x", "created_at": "0001-01-01T00:00:00+01:00"}, 422),
    ("/v1/memories", {"user_id": "fuzz-dates", "content": "x", "expires_at": "0001-01-01T00:00:00Z"}, 201),
    ("/v1/conversations", {"user_id": "fuzz-dates", "session_id": "s", "mode": "raw", "messages": [
        {"role": "user", "content": "x", "created_at": "9999-12-31T23:59:59-01:00"}]}, 422),
]


@pytest.mark.parametrize(("path", "body", "status"), OUT_OF_RANGE, ids=[
    "search-until-0399", "search-since-0999", "search-until-last", "search-until-past-9999", "write-before-0001",
    "write-expired-0001", "turn-past-9999"])
def test_timestamps_far_from_now_are_no_server_error(serve_app: dict[str, Any], path: str, body: dict,
                                                     status: int) -> None:
    with httpx.Client(base_url=str(serve_app["url"]), headers={"Authorization": f"Bearer {FUZZ_KEY}"},
                      timeout=60) as client:
        r = client.post(path, json=body)
    assert r.status_code == status, r.text
    if status == 422:
        assert r.json()["error"] == {"code": "invalid_input", "message": r.json()["error"]["message"]}
        assert "outside the years 1 to 9999" in r.json()["error"]["message"], r.text


def test_a_body_that_is_not_utf8_is_invalid_input(serve_app: dict[str, Any]) -> None:
    """docs/api.md: bad JSON is 422 `invalid_input`, bytes that are not UTF-8 among it."""
    with httpx.Client(base_url=str(serve_app["url"]), headers={"Authorization": f"Bearer {FUZZ_KEY}"},
                      timeout=60) as client:
        r = client.post("/v1/jobs/consolidate", content=b'{"user_id": "\xe9"}',
                        headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", r.text
    assert r.json()["error"]["message"].startswith("body: not UTF-8"), r.text


def test_a_metadata_key_with_nul_is_invalid_input(serve_app: dict[str, Any]) -> None:
    with httpx.Client(base_url=str(serve_app["url"]), headers={"Authorization": f"Bearer {FUZZ_KEY}"},
                      timeout=60) as client:
        r = client.post("/v1/memories", json={"user_id": "fuzz-nul", "content": "x", "metadata": {"a\u0000b": 1}})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", r.text
        r = client.post("/v1/conversations", json={"user_id": "fuzz-nul", "session_id": "s", "mode": "raw", "messages": [
            {"role": "user", "content": "x", "metadata": {"\u0000": "v"}}]})
        assert r.status_code == 422 and "NUL" in r.json()["error"]["message"], r.text


def test_consolidations_refused_by_the_lease_end_failed(serve_app: dict[str, Any]) -> None:
    """Runs started together: one holds the lease, the others end `failed` with `consolidation_running`
    (none stays `queued`)."""
    with httpx.Client(base_url=str(serve_app["url"]), headers={"Authorization": f"Bearer {FUZZ_KEY}"},
                      timeout=60) as client:
        with ThreadPoolExecutor(max_workers=3) as pool:
            answers = list(pool.map(lambda _: client.post("/v1/jobs/consolidate", json={"user_id": "fuzz-lease"}), range(3)))
        ids = [r.json()["job_id"] for r in answers]
        deadline, states = time.monotonic() + 300, {}  # generous: a loaded two-core machine
        while time.monotonic() < deadline:
            jobs = [client.get(f"/v1/jobs/{job_id}").json() for job_id in ids]
            states = {job["id"]: (job["state"], job["error"]) for job in jobs}
            if all(state in ("succeeded", "failed") for state, _ in states.values()):
                break
            time.sleep(0.5)
    assert all(state in ("succeeded", "failed") for state, _ in states.values()), states
    refused = [error for state, error in states.values() if state == "failed"]
    assert all(error.startswith("consolidation_running: ") for error in refused), states
