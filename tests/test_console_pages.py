"""Every page of the console at 1280x800 and at 390 px wide, without horizontal scrolling, with a
screenshot of each (`make console-screenshots` keeps them in docs/console). How fast the first page of
a large user renders is benchmarks/console_first_page.py's to measure."""

from __future__ import annotations

from pathlib import Path

from tests.browser import NARROW, WIDE, expect, screenshot, unique_user, wait_job
from tests.test_console import flip, seed

ROOT = Path(__file__).resolve().parents[1]
# Memories of the tour's user, as an agent would have stored them.
TOUR = [
    ("The user prefers Python for backend work", "semantic", {"agent_id": "support-bot", "session_id": "s-0412"}),
    ("Refunds over 500 EUR need two approvals", "procedural", {"team_id": "billing"}),
    ("Asked about the March invoice on the phone", "episodic", {"agent_id": "support-bot"}),
    ("Lives in Lisbon and works remotely", "semantic", {}),
    ("The user likes hiking in the Alps", "semantic", {}),
    ("The user enjoys hiking in the Alps", "semantic", {}),
]


def test_every_page_fits_both_widths(api, console, screenshots) -> None:
    c = api()
    user = unique_user("ana")
    for content, memory_type, fields in TOUR:
        seed(c, user, content, memory_type=memory_type, **fields)
    flipped = flip(c, user)
    dry_run = wait_job(c, c.post("/v1/jobs/consolidate", json={"user_id": user, "dry_run": True}).json()["job_id"])
    gone = unique_user("gone")
    seed(c, gone, "Erased in the tour")
    erasure = wait_job(c, c.delete(f"/v1/users/{gone}").json()["job_id"])
    pages = {
        "users": f"#/users?prefix={user[:4]}",
        "memories": f"#/user/{user}?q=Which+language+for+the+backend%3F",
        "memory": f"#/user/{user}/memory/{flipped['old']['id']}",
        "timeline": f"#/user/{user}/timeline",
        "jobs": "#/jobs",
        "dry-run": f"#/job/{dry_run['id']}",
        "erase": f"#/user/{user}/erase",
        "receipt": f"#/job/{erasure['id']}",
    }
    narrow_shots = {"memories", "memory", "timeline"}
    for name, viewport in (("wide", WIDE), ("narrow", NARROW)):
        signed_out = console(None, viewport=viewport)
        signed_out.page.goto(f"{signed_out.url}/console/")
        expect(signed_out.page.get_by_role("heading", name="Sign in")).to_be_visible()
        widths = {"sign-in": signed_out.fits()}
        if name == "wide":
            screenshot(signed_out.page, screenshots / "sign-in.png", full_page=False)
        tab = console("acme-admin", viewport=viewport)
        for page_name, route in pages.items():
            tab.open(route)
            tab.page.wait_for_load_state("networkidle")
            widths[page_name] = tab.fits()
            assert "null" not in tab.page.get_by_role("main").inner_text(), page_name  # nothing left out shows as text
            if name == "wide" or page_name in narrow_shots:
                suffix = "" if name == "wide" else "-narrow"
                screenshot(tab.page, screenshots / f"{page_name}{suffix}.png")
        too_wide = {page: w for page, w in widths.items() if w[0] > w[1]}
        assert not too_wide, f"{name}: pages wider than the window (scrollWidth, clientWidth): {too_wide}"
