"""The operator console in a real browser (the system's headless Chromium), acting as an operator
does: sign in, find a user, search, read a memory's history, restore, edit, delete, send feedback,
replay the timeline, run a consolidation dry run, erase a user; a reader's key refused; memory text
that looks like markup shown as text. On the shared Serve app, over loopback."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.browser import expect, unique_user, wait_job

CONSOLE = Path(__file__).resolve().parents[1] / "serve_app" / "console"


def seed(client, user: str, *contents: str, **fields) -> list[str]:
    r = client.post("/v1/memories", json={"memories": [{"user_id": user, "content": c, **fields} for c in contents]})
    assert r.status_code == 201, r.text
    return r.json()["ids"]


def flip(client, user: str) -> dict:
    """Two conversations whose second supersedes the first one's memory: (old, new) memories and jobs."""
    jobs = []
    for session, text in (("s1", "I prefer VS Code for coding."),
                          ("s2", "Actually I switched from VS Code to Neovim last month.")):
        r = client.post("/v1/conversations", json={"user_id": user, "session_id": session, "mode": "rules",
                                                   "messages": [{"role": "user", "content": text}]})
        job = wait_job(client, r.json()["job_id"])
        assert job["state"] == "succeeded", job
        jobs.append(job["id"])
    (old,) = client.get("/v1/memories", params={"user_id": user, "status": "superseded"}).json()["memories"]
    (new,) = [m for m in client.get("/v1/memories", params={"user_id": user}).json()["memories"] if "Neovim" in m["content"]]
    return {"old": old, "new": new, "jobs": jobs}


# -- what the server sends -------------------------------------------------------------------------


def test_console_is_served_with_a_strict_policy(api) -> None:
    c = api(None)
    moved = c.get("/console", follow_redirects=False)
    assert moved.status_code == 308 and moved.headers["location"] == "/console/"
    page = c.get("/console/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = dict(part.strip().split(" ", 1) for part in page.headers["content-security-policy"].split(";"))
    assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'" and policy["object-src"] == "'none'"
    assert policy["require-trusted-types-for"] == "'script'"
    assert "unsafe" not in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
    script = c.get("/console/app.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "content-security-policy" in script.headers
    missing = c.get("/console/nothing.js")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert c.get("/console/../serve_app/app.py").status_code == 404
    assert not [p for p in c.get("/openapi.json").json()["paths"] if p.startswith("/console")]


@pytest.mark.unit
def test_pages_are_built_as_text_never_as_markup() -> None:
    """No inline script or style in the page, nothing from another host, and no script turns a
    string into markup (the policy's Trusted Types would refuse it anyway)."""
    html = (CONSOLE / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html) and "<style" not in html and " style=" not in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    for path in CONSOLE.glob("*.js"):
        code = path.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                     "http://", "https://", "localStorage", ".style."):
            assert sink not in code.replace("http://www.w3.org/2000/svg", ""), (path.name, sink)
        if path.name != "dom.js":  # its append and fill skip a null child, where the DOM's own show "null"
            assert not re.search(r"\.(append|replaceChildren)\(", code), path.name


@pytest.mark.unit
def test_nothing_is_loaded_from_elsewhere() -> None:
    """The console works offline: its styles import nothing and fetch no font or image from another host."""
    for path in CONSOLE.glob("*.css"):
        css = path.read_text()
        assert "@import" not in css and not re.search(r"url\(\s*['\"]?(https?:)?//", css), path.name


@pytest.mark.unit
def test_without_api_keys_the_console_answers_only_this_machine(monkeypatch) -> None:
    from starlette.requests import Request

    from serve_app import middleware
    from serve_app.routes import console

    def request(client: str, forwarded: str | None = None) -> Request:
        headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded else []
        return Request({"type": "http", "method": "GET", "path": "/console/", "headers": headers, "client": (client, 50000)})

    monkeypatch.setattr(middleware, "STATE", SimpleNamespace(keys=None))  # as a replica without a keys file
    assert console.refused(request("127.0.0.1")) is None and console.refused(request("::1")) is None
    for elsewhere in (request("192.168.1.20"), request("127.0.0.1", "203.0.113.9"), request("127.0.0.1", "proxy")):
        answer = console.refused(elsewhere)
        assert answer is not None and answer.status_code == 403 and b"AGENT_MEMORY_API_KEYS_FILE" in answer.body
    monkeypatch.setattr(middleware, "STATE", SimpleNamespace(keys=object()))  # keys configured: the API asks for one
    assert console.refused(request("192.168.1.20")) is None


# -- an operator at work ---------------------------------------------------------------------------


def test_sign_in_refuses_an_unknown_key(console) -> None:
    tab = console(None)
    page = tab.page
    page.goto(f"{tab.url}/console/#/users")
    page.get_by_label("API key").fill("not-a-key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("401 unauthorized")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    tab.sign_in("acme-reader")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_role("button", name="Sign out")).to_be_hidden()


def test_find_a_user_and_search_with_score_parts(api, console) -> None:
    user = unique_user("find")
    seed(api(), user, "The user prefers Python for backend work", "Lives in Lisbon", "Has a cat named Miso")
    page = console("acme-reader").page
    page.get_by_label("User id starts with").fill(user[:9])
    page.get_by_role("button", name="Search users").click()
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=user))
    expect(row).to_contain_text("3 active")
    expect(row).to_contain_text("3 semantic")
    row.get_by_role("link", name=user).click()
    expect(page.get_by_role("heading", name=f"User {user}")).to_be_visible()
    expect(page.get_by_role("link", name="Lives in Lisbon")).to_be_visible()
    page.get_by_label("Search this user's memories").fill("Which language for the backend?")
    page.get_by_role("button", name="Search", exact=True).click()
    hits = page.get_by_role("region", name="Search results")
    first = hits.get_by_role("row").nth(1)
    expect(first).to_contain_text("The user prefers Python for backend work")
    for part in ("semantic", "keyword", "recency", "importance"):
        expect(first.get_by_role("meter", name=part)).to_be_visible()
    expect(page.get_by_role("main")).not_to_contain_text("null")
    # A filter the list applies: one type only.
    page.get_by_label("Type").select_option("procedural")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.get_by_role("region", name="Memories")).to_contain_text("No memory matches")


def test_memory_history_sources_and_restore(api, console) -> None:
    user = unique_user("restore")
    flipped = flip(api(), user)
    old, new = flipped["old"], flipped["new"]
    tab = console("acme-writer")
    page = tab.page
    tab.open(f"#/user/{user}?status=superseded")
    page.get_by_role("link", name=old["content"]).click()
    expect(page.get_by_role("heading", name=f"Memory {old['id']}")).to_be_visible()
    history = page.get_by_role("region", name="History")
    expect(history).to_contain_text("created")
    expect(history).to_contain_text("superseded")
    expect(page.get_by_role("region", name="Where it came from")).to_contain_text("I prefer VS Code for coding.")
    lineage = page.get_by_role("region", name="Superseded and merged")
    expect(lineage.get_by_role("link", name=new["id"])).to_be_visible()
    page.get_by_role("button", name="Restore").click()
    expect(page.get_by_role("status")).to_contain_text("Restored")
    expect(page.get_by_role("region", name="History")).to_contain_text("restored")
    assert api().get(f"/v1/memories/{old['id']}", params={"user_id": user}).json()["status"] == "active"
    # What replaced it tells what it superseded.
    tab.open(f"#/user/{user}/memory/{new['id']}")
    expect(page.get_by_role("region", name="Superseded and merged")).to_contain_text("It superseded no other memory")


def test_edit_feedback_and_delete(api, console) -> None:
    user = unique_user("edit")
    (memory_id,) = seed(api(), user, "Prefers tea in the morning")
    tab = console("acme-writer")
    page = tab.page
    tab.open(f"#/user/{user}/memory/{memory_id}")
    page.get_by_text("Edit", exact=True).click()
    page.get_by_label("Content").fill("Prefers green tea in the morning")
    page.get_by_role("button", name="Save changes").click()
    expect(page.get_by_role("status")).to_contain_text("Saved")
    expect(page.locator("blockquote")).to_have_text("Prefers green tea in the morning")
    expect(page.get_by_role("region", name="History")).to_contain_text("updated")

    page.get_by_label("Feedback signal").select_option("wrong")
    page.get_by_label("Note (optional)").fill("said coffee last week")
    page.get_by_role("button", name="Send feedback").click()
    expect(page.get_by_role("status")).to_contain_text("Feedback “wrong” recorded")
    expect(page.get_by_role("region", name="History")).to_contain_text("said coffee last week")
    events = api().get(f"/v1/memories/{memory_id}/history", params={"user_id": user}).json()["events"]
    assert events[-1]["action"] == "feedback"

    confirm = page.get_by_role("button", name="Yes, delete it")
    expect(confirm).to_be_hidden()  # asked only after Delete
    page.get_by_role("button", name="Delete", exact=True).click()
    confirm.click()
    expect(page.get_by_role("status")).to_contain_text(f"Deleted memory {memory_id}")
    assert api().get(f"/v1/memories/{memory_id}", params={"user_id": user}).status_code == 404


def test_timeline_replays_what_memory_held(api, console) -> None:
    user = unique_user("timeline")
    flipped = flip(api(), user)
    old, new = flipped["old"]["content"], flipped["new"]["content"]
    tab = console("acme-reader")
    page = tab.page
    tab.open(f"#/user/{user}")
    page.get_by_role("link", name="Timeline").click()
    expect(page.get_by_role("heading", name=f"Timeline of {user}")).to_be_visible()
    held = page.get_by_role("region", name="What the memory held")
    expect(held.get_by_role("link", name=new)).to_be_visible()  # now: the new memory alone
    expect(held.get_by_role("link", name=old)).to_have_count(0)
    slider = page.get_by_role("slider", name="Moment to replay")
    slider.focus()
    page.keyboard.press("Home")  # the first change: the old memory was created
    expect(held.get_by_role("link", name=old)).to_be_visible()
    expect(held.get_by_role("link", name=new)).to_have_count(0)
    expect(page.get_by_role("region", name="Changes up to this moment")).to_contain_text("created")
    assert "at=" in page.url  # the moment is part of the address
    page.keyboard.press("End")
    expect(held.get_by_role("link", name=new)).to_be_visible()
    expect(page.get_by_role("region", name="Changes up to this moment")).to_contain_text("superseded")


def test_consolidation_dry_run_then_apply(api, console) -> None:
    user = unique_user("dryrun")
    c = api()
    seed(c, user, "The user likes hiking in the Alps", "The user enjoys hiking in the Alps", "Owns a red bicycle")
    tab = console("acme-admin")
    page = tab.page
    tab.open("#/jobs")
    page.get_by_label("User (empty: the whole org)").fill(user)
    page.get_by_role("button", name="Start a consolidation dry run").click()
    merges = page.get_by_role("region", name="Merges it would make")
    expect(merges).to_contain_text("Merges it would make: 1", timeout=120_000)
    expect(merges).to_contain_text("The user enjoys hiking in the Alps")
    expect(merges).to_contain_text("The user likes hiking in the Alps")
    assert len(c.get("/v1/memories", params={"user_id": user}).json()["memories"]) == 3  # nothing changed
    dry_run = page.url
    page.get_by_role("button", name="Apply: run consolidation for real").click()
    expect(page).not_to_have_url(dry_run)
    expect(page.get_by_text("consolidation", exact=True)).to_be_visible()  # not a dry run
    expect(page.get_by_text("succeeded", exact=True)).to_be_visible(timeout=120_000)
    assert len(c.get("/v1/memories", params={"user_id": user}).json()["memories"]) == 2
    tab.open("#/jobs?kind=consolidation")
    expect(page.get_by_role("table")).to_contain_text("consolidation (dry run)")


def test_erase_a_user_after_typing_their_id(api, console) -> None:
    user = unique_user("erase")
    c = api()
    seed(c, user, "Erase this memory", "And this one")
    tab = console("acme-admin")
    page = tab.page
    tab.open(f"#/user/{user}")
    page.get_by_role("link", name="Erase this user").click()
    erase = page.get_by_role("button", name="Erase this user")
    expect(erase).to_be_disabled()
    page.get_by_label("Type the user id").fill(user[:-1])
    expect(erase).to_be_disabled()
    page.get_by_label("Type the user id").fill(user)
    erase.click()
    expect(page.get_by_role("heading", name="Erased")).to_be_visible()
    receipt = page.get_by_role("region", name="Receipt")
    expect(page.get_by_text("succeeded", exact=True)).to_be_visible(timeout=120_000)
    expect(receipt).to_contain_text("files_rewritten")
    assert c.get("/v1/memories", params={"user_id": user}).json()["memories"] == []
    # The timeline keeps that it happened, without any content.
    tab.open(f"#/user/{user}/timeline")
    expect(page.get_by_role("main")).not_to_contain_text("Erase this memory")


def test_a_reader_is_refused_an_erasure(api, console) -> None:
    user = unique_user("keep")
    seed(api(), user, "Keep this memory")
    tab = console("acme-reader")
    page = tab.page
    tab.open(f"#/user/{user}/erase")
    page.get_by_label("Type the user id").fill(user)
    page.get_by_role("button", name="Erase this user").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("Refused (403 forbidden)")
    expect(alert).to_contain_text("needs 'admin'")
    assert len(api().get("/v1/memories", params={"user_id": user}).json()["memories"]) == 1


def test_memory_text_that_looks_like_markup_stays_text(api, console) -> None:
    user = unique_user("xss")
    attacks = ["<script>window.__pwned = 'script'</script>", "<img src=x onerror=\"window.__pwned = 'img'\">",
               "<svg onload=\"window.__pwned = 'svg'\"></svg> & <b>bold</b>"]
    ids = seed(api(), user, *attacks, metadata={"note": "<img src=y onerror=\"window.__pwned = 'meta'\">"})
    tab = console("acme-admin")
    page = tab.page
    tab.open(f"#/user/{user}")
    for text in attacks:
        expect(page.get_by_role("link", name=text)).to_be_visible()
    page.get_by_label("Search this user's memories").fill("img onerror")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.get_by_role("region", name="Search results")).to_contain_text(attacks[1])
    tab.open(f"#/user/{user}/memory/{ids[1]}")
    expect(page.locator("blockquote")).to_have_text(attacks[1])
    expect(page.get_by_role("definition").get_by_text("<img src=y onerror", exact=False).first).to_be_visible()
    tab.open(f"#/user/{user}/timeline")
    expect(page.get_by_role("region", name="Changes up to this moment")).to_contain_text("<script>")
    main = page.get_by_role("main")
    assert main.locator("img, script, svg b, b").count() == 0
    assert page.evaluate("window.__pwned") is None
