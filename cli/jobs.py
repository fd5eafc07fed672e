"""The batch jobs: consolidate, reembed, reindex, and `jobs show` / `jobs retry` of a background job."""

from __future__ import annotations

import sys
from typing import Any

import click

from cli.options import (
    ON_EITHER,
    ON_STORE,
    STORE,
    STORE_OR_SERVER,
    Group,
    client,
    command,
    server_options,
    server_url,
    settings,
    store_options,
)
from cli.output import print_json

ON_RAY = f"{STORE} --engine ray, or --address, runs it on Ray (a Ray of its own, or the cluster named)."


@command("consolidate", short_help=f"Merge restatements, expire, decay, purge; compact. {ON_STORE}", epilog=ON_RAY)
@click.option("--user-id", default=None, metavar="USER", help="Only this user (of --org-id, default: default).")
@click.option("--dry-run", is_flag=True, help="Print the clusters it would merge; change nothing.")
@click.option("--engine", default="auto", show_default=True, type=click.Choice(["auto", "ray", "local"]),
              help="A Ray Data job, or in this process (auto: Ray above a few users).")
@store_options(ray=True, org=False)
@click.option("--org-id", default=None, metavar="ORG", help="Only this org (default: every org).")
def consolidate(user_id: str | None, dry_run: bool, engine: str, storage_uri: str | None, address: str | None,
                org_id: str | None) -> int:
    """Merge restatements, expire, decay and purge every user's memories (or one org's, one user's); then compact."""
    from jobs.consolidate import run_consolidation

    use_ray = {"auto": None, "ray": True, "local": False}[engine]
    report = run_consolidation(settings(storage_uri), org_id=org_id, user_id=user_id, dry_run=dry_run,
                               use_ray=use_ray, address=address, show_progress=sys.stderr.isatty())
    print_json(report)
    return 1 if report["errors"] else 0


@command("reembed", short_help=f"Re-embed every memory with a model. {ON_STORE}",
         epilog=ON_RAY)
@click.option("--model", required=True, help="A sentence-transformers name or path, or openai:<model>.")
@click.option("--engine", default="ray", show_default=True, type=click.Choice(["ray", "local"]))
@store_options(ray=True, org=False)
@click.option("--org-id", hidden=True)  # accepted, as by every command on the store; reembedding is of all orgs
def reembed(model: str, engine: str, storage_uri: str | None, address: str | None, **_: Any) -> int:
    """Recompute every memory's vector with a model, then switch the store to it (the model in force
    again: after `embedding_gloss_chinese` changed how Chinese is embedded)."""
    from jobs.reembed import reembed as run_reembed
    from jobs.runtime import ensure_ray

    if address:
        ensure_ray(address)
    print_json(run_reembed(settings(storage_uri), model, engine=engine, show_progress=sys.stderr.isatty()))  # type: ignore[arg-type]
    return 0


@command("reindex", short_help=f"Rebuild every memory's index text and keywords. {ON_STORE}",
         epilog=f"{STORE} Safe while the service runs.")
@click.option("--dry-run", is_flag=True, help="Count what would change and say what the store would record; write nothing.")
@store_options(org=False)
@click.option("--org-id", default=None, metavar="ORG", help="Only this org (default: every org).")
def reindex(dry_run: bool, storage_uri: str | None, org_id: str | None, **_: Any) -> int:
    """Rebuild every memory's index text, keywords and (where its text changed, or its Chinese was
    embedded another way than the settings embed it) vector as this version writes them; safe while
    the service runs."""
    from jobs.reindex import reindex as run_reindex

    print_json(run_reindex(settings(storage_uri), org_id=org_id, dry_run=dry_run))
    return 0


@click.group("jobs", cls=Group, short_help=f"Background jobs: show one, retry a failed one. {ON_EITHER}")
def jobs() -> None:
    """Background jobs: show one, retry a failed one."""


@jobs.command("show", short_help="A job's state, error and report.", epilog=STORE_OR_SERVER)
@click.argument("job_id")
@server_options
@store_options()
@click.pass_context
def show(ctx: click.Context, job_id: str, org_id: str, storage_uri: str | None, **_: Any) -> int:
    """A background job's state, progress, error and report."""
    if url := server_url(ctx):
        print_json(client(ctx, url).get_job(job_id).model_dump(mode="json"))
        return 0
    from agent_memory.models import OrgScope
    from storage.connect import open_service

    with open_service(settings(storage_uri), with_embedder=False) as service:
        job = service.store.get_job(OrgScope(org_id), job_id)
    if job is None:
        print(f"job {job_id} not found", file=sys.stderr)
        return 1
    print_json(job)
    return 0


@jobs.command("retry", short_help="Re-run a failed conversation job from the message log.", epilog=STORE)
@click.argument("job_id")
@click.option("--force", is_flag=True, help="Re-run even if the job did not fail.")
@store_options()
def retry(job_id: str, force: bool, org_id: str, storage_uri: str | None, **_: Any) -> int:
    """Re-run a failed conversation job here, from the logged messages."""
    from agent_memory.errors import ConflictError
    from agent_memory.models import OrgScope
    from jobs.conversations import run_conversation_job
    from storage.connect import open_service

    with open_service(settings(storage_uri)) as service:
        job = service.store.get_job(OrgScope(org_id), job_id)
        if job is not None and job["state"] != "failed" and not force:
            raise ConflictError(f"job {job_id} is {job['state']}; only failed jobs are retried (or pass --force)")
        state = run_conversation_job(service, org_id, job_id)
        print_json(service.store.get_job(OrgScope(org_id), job_id))
    return 0 if state == "succeeded" else 1
