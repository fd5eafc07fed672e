"""The HTTP routes, one module per resource: health, memories, users, conversations, jobs.

Each module holds an `APIRouter` and a class of route methods; `serve_app.ingress` makes the
deployment class of all of them (Serve calls a route with the replica's instance as `self`).
A replica receives these modules by value, with only the names their functions use: their
annotations are evaluated when they are defined (no `from __future__ import annotations`), since
FastAPI reads them in the replica.
"""
