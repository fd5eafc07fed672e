"""The maintenance interface: what only jobs and the Writer receive. Compaction, folds of new
rows and of the access log, clustering, erasure's version purge, the run leases, and the reads
that cross tenants (owners, store-wide stats). The tenant store (`LanceStore`) has none of this.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pyarrow as pa

from agent_memory.models import OrgScope, Scope
from storage import schema as sc
from storage.access_log import AccessLog
from storage.filters import Where, scoped
from storage.leases import Leases
from storage.tables import OPTIMIZE_ATTEMPTS, Tables, retrying

# The physical order `cluster` gives memories: one user's rows together, oldest first.
CLUSTER_ORDER = ["org_id", "user_id", "created_at"]
# fold_new_rows: an older uncovered fragment joins a fold while it holds at most this many times
# the rows of the newer ones taken so far.
FOLD_RATIO = 4
# A purge's rewrite meets the Writer's folds and other compactions: up to about 40 s of retries
# (then, given a turn of its own, it runs between the Writer's commits).
PURGE_ATTEMPTS = 13
# Between a purge's rewrite and the drop of older versions: time for searches that opened an
# older version to finish and for every reader to move to the new one.
PURGE_SETTLE_S = 2.0


class StoreMaintenance:
    """Upkeep of one store, on the tables its tenant store reads (one `Tables`, shared)."""

    def __init__(self, tables: Tables, access: AccessLog) -> None:
        self.tables = tables
        self.access = access
        self.leases = Leases(tables)

    def table(self, name: str) -> Any:
        """The raw LanceDB table of that name (for notebooks, tests and the jobs' own reads)."""
        return self.tables.table(name)

    def fold_access(self, scope: Scope | OrgScope | None = None) -> int:
        """Add logged recall hits to the memory rows (one user, one org, or all); the rows updated."""
        return self.access.fold(scope)

    def versions(self, name: str) -> list[int]:
        """The retained versions of a table (erasure tests read every one)."""
        return [int(v["version"]) for v in self.tables.table(name).list_versions()]

    def index_format(self) -> int:
        """The layout of what search reads in `memories` (see `schema.INDEX_FORMAT_KEY`)."""
        return recorded(self.tables).index_format

    def set_index_format(self, value: int) -> None:
        """Record the layout every row of `memories` now has (one commit of the schema metadata)."""
        self._record(sc.INDEX_FORMAT_KEY, str(value).encode())

    def chinese_gloss(self) -> bool | None:
        """Whether the vectors of Chinese memories embed their gloss (None: the store does not say;
        see `schema.GLOSS_KEY`)."""
        return recorded(self.tables).chinese_gloss

    def set_chinese_gloss(self, glossed: bool) -> None:
        """Record how every Chinese memory of `memories` is now embedded (one commit of the metadata)."""
        self._record(sc.GLOSS_KEY, sc.gloss_name(glossed).encode())

    def _record(self, key: bytes, value: bytes) -> None:
        """One key of the schema metadata of `memories` set, the others left as they are."""
        self.tables.table(sc.MEMORIES).to_lance().update_schema_metadata({key.decode(): value.decode()})

    def jobs_in(self, kind: str, states: Sequence[str]) -> list[dict[str, Any]]:
        """The jobs of a kind in these states, of every org, oldest first (as `get_job` gives them)."""
        rows = self.tables.rows(sc.JOBS, Where().eq("kind", kind).isin("state", states))
        return sorted((sc.job_dict(r) for r in rows), key=lambda r: (r["created_at"], r["id"]))

    def drop_orphan_access(self, scope: Scope) -> int:
        """Delete the scope's user's logged recall hits of memories that no longer exist; how many.

        Each ingress replica buffers the hits of its recalls for `access_flush_seconds`: hits of
        memories recalled just before an erasure reach the log after the rows were deleted."""
        owner = Where().scope(scope, owner_only=True)
        access = self.tables.table(sc.ACCESS)
        logged = set(access.search().where(owner.render()).select(["memory_id"]).limit(None).to_arrow()
                     .column("memory_id").to_pylist())
        if not logged:
            return 0
        live = self.tables.table(sc.MEMORIES).search().where(
            Where().scope(scope, owner_only=True).isin("id", sorted(logged)).render()
        ).select(["id"]).limit(None).to_arrow().column("id").to_pylist()
        orphans = sorted(logged - set(live))
        dropped = 0
        for start in range(0, len(orphans), 500):
            where = Where().scope(scope, owner_only=True).isin("memory_id", orphans[start:start + 500]).render()
            dropped += access.count_rows(where)
            retrying(lambda w=where: access.delete(w), "drop orphan access rows")
        return dropped

    def memory_owners(self, scope: OrgScope | None = None) -> list[tuple[str, str]]:
        """Every (org, user) that holds memories, sorted; within one org, or across all (None)."""
        scan = self.tables.table(sc.MEMORIES).search()
        if scope is not None:
            scan = scan.where(scoped(scope).render())
        rows = scan.select(["org_id", "user_id"]).limit(None).to_arrow()
        distinct = rows.group_by(["org_id", "user_id"]).aggregate([])
        return sorted(zip(distinct.column("org_id").to_pylist(), distinct.column("user_id").to_pylist(), strict=True))

    def purge_versions(self, names: Sequence[str] = sc.TABLES, *, reindex: Sequence[str] = (),
                       in_turn: Callable[[Callable[[], Any]], Any] | None = None,
                       keep: timedelta = timedelta(0)) -> dict[str, dict[str, int]]:
        """Erasure's last step: `rewrite_deleted` for each table (indexes rebuilt for those in
        `reindex` or whose files were rewritten), then, after `PURGE_SETTLE_S`, `drop_old_versions`.
        Returns, per table, the data files rewritten and written and the old versions removed.

        Dropping versions removes the files that only older versions referenced. A search that
        opened an older version just before would fail on them, so readers get `PURGE_SETTLE_S`
        to move to the rewritten one (every search checks for the latest version first). A
        commit that started from an older version would fail too: `in_turn` runs the drop where
        the caller's own commits cannot run beside it (the Writer's queue); the commits of other
        processes are retried as conflicts. `keep` keeps the versions of that last while (a
        purge from outside the Writer's process, which cannot take its turn, keeps a few
        minutes: their files go at the next purge).
        """
        turn = in_turn or (lambda call: call())
        report = {}
        for name in names:
            try:
                report[name] = self.rewrite_deleted(name, reindex=name in reindex)
            except Exception as exc:  # noqa: BLE001 - lance raises its own conflict types
                if in_turn is None or "conflict" not in str(exc).lower():
                    raise
                # Updates of the same fragments kept winning the race (a busy table): between the
                # Writer's commits nothing of its own can.
                report[name] = in_turn(lambda n=name: self.rewrite_deleted(n, reindex=n in reindex))
        time.sleep(PURGE_SETTLE_S)
        dropped = turn(lambda: {name: self.drop_old_versions(name, keep=keep) for name in names})
        return {name: {**report[name], "versions_removed": dropped[name]} for name in names}

    def rewrite_deleted(self, name: str, *, reindex: bool = False) -> dict[str, int]:
        """Rewrite every fragment of a table that holds a deleted row, and rebuild every index
        from the live rows when any was rewritten (or `reindex`); the data files rewritten and
        written.

        Lance deletes a row by marking it in a deletion file and keeps the fragment's data file
        until the fragment is rewritten; compaction rewrites only fragments whose deleted share
        passes a threshold. Here the threshold is 0, so no data file that held a deleted row
        survives in the latest version, however small the deleted share of it.
        """
        table = self.tables.table(name)

        def rewrite() -> Any:
            return table.to_lance().optimize.compact_files(materialize_deletions=True, materialize_deletions_threshold=0.0)

        metrics = retrying(rewrite, f"purge {name}", PURGE_ATTEMPTS)
        if reindex or metrics.fragments_removed:
            retrying(lambda: self.tables.create_indexes(table, name, replace=True), f"reindex {name}", PURGE_ATTEMPTS)
        return {"files_rewritten": int(metrics.fragments_removed), "files_written": int(metrics.fragments_added)}

    def drop_old_versions(self, name: str, *, keep: timedelta = timedelta(0)) -> int:
        """Delete every version of a table but the latest, with the files only they referenced;
        how many versions went (those of the last `keep` stay). Files that no version ever referenced (a write in flight has
        such files, and one killed before its commit leaves them) are kept: Lance removes them
        after 7 days."""
        with warnings.catch_warnings():
            # Dropping every older version is the point here; Lance warns about exactly that.
            warnings.simplefilter("ignore", UserWarning)
            cleaned = self.tables.table(name).to_lance().cleanup_old_versions(older_than=keep, delete_unverified=False)
        return int(cleaned.old_versions)

    def optimize(self, *, retain: timedelta = timedelta(days=7), cluster: bool = False) -> dict[str, Any]:
        """Compact fragments, fold new rows into indexes, and clean versions older than `retain`.

        With `cluster`, memories are also put in (org, user) order after compaction (see `cluster`).
        """
        report: dict[str, Any] = {}
        for name in sc.TABLES:
            table = self.tables.table(name)
            before = self.tables.shape(name)
            # Another process's compaction (the Writer's folds, an import's or a consolidation's
            # pass) may commit a rewrite of the same fragments meanwhile: Lance then refuses this
            # one as a retryable conflict, and it is planned again, for up to about 5 s.
            compact = functools.partial(table.optimize, cleanup_older_than=retain)
            retrying(compact, f"optimize {name}", OPTIMIZE_ATTEMPTS)
            report[name] = {"before": before}
            if cluster and name == sc.MEMORIES:
                report[name]["clustered"] = clustered = self.cluster()
                if clustered["fragments"]:  # index the rewritten fragments
                    retrying(compact, f"optimize {name}", OPTIMIZE_ATTEMPTS)
            report[name]["after"] = self.tables.shape(name)
        return report

    def fold_new_rows(self, *, reindex_rows: int, tables: Sequence[str] = (sc.MEMORIES,)) -> dict[str, int]:
        """Keep id lookups and per-user reads fast between full optimizations, cheaply.

        Every commit (a write, an access-log flush) leaves a small fragment that no index
        covers, and every per-user search, id lookup and insert-if-absent opens and scans each
        such fragment: about 0.3 ms apiece. At 200k memories a user's scan took 3 ms on a
        compacted table and 16 ms with 50 one-row fragments written since (26 ms of CPU); an
        insert-if-absent took 4 ms with one of them and 12 ms with 31. So, for each table:
        1. The newest uncovered fragments are compacted into one, oldest last, as long as the
           next older one holds at most `FOLD_RATIO` times the rows taken so far. Each fold
           rewrites little more than what is new, and the uncovered fragments stay few (a
           handful of growing sizes), however often it runs.
        2. Once `reindex_rows` rows are uncovered, the scalar indexes are updated to cover them.
           Lance rewrites each index to do that (0.2 s and 7 MB at 200k rows, five times that at
           1M), so it is not done for every few rows. The full-text index, which only wide
           scopes use, waits for `optimize`.
        Returns the fragments compacted and the rows indexed, summed over the tables (both 0
        when nothing was committed).
        """
        done = {"fragments_compacted": 0, "rows_indexed": 0}
        for name in tables:
            table = self.tables.table(name)
            dataset = table.to_lance()
            covered: dict[str, set[int]] = defaultdict(set)
            for index in dataset.list_indices():  # one entry per index segment
                if index["type"] != "Inverted" and not index["name"].startswith("__"):
                    covered[index["name"]].update(index["fragment_ids"])
            rows = {f.fragment_id: f.metadata.physical_rows for f in dataset.get_fragments()}
            everywhere = set.intersection(*covered.values()) if covered else set(rows)
            uncovered = sorted(set(rows) - everywhere)
            run: list[int] = []
            for fragment in reversed(uncovered):
                if run and rows[fragment] > FOLD_RATIO * sum(rows[f] for f in run):
                    break
                run.append(fragment)
            if len(run) >= 2:
                metrics = dataset.optimize.compact_files(
                    excluded_fragment_ids=sorted(set(rows) - set(run)), materialize_deletions=False
                )
                done["fragments_compacted"] += metrics.fragments_removed
                dataset = table.to_lance()
                rows = {f.fragment_id: f.metadata.physical_rows for f in dataset.get_fragments()}
            uncovered = sorted(set(rows) - everywhere)
            pending = sum(rows[f] for f in uncovered)
            if uncovered and pending >= reindex_rows:
                dataset.optimize.optimize_indices(index_names=sorted(n for n, ids in covered.items() if set(rows) - ids))
                done["rows_indexed"] += pending
        return done

    def cluster(self, *, attempts: int = 3) -> dict[str, int]:
        """Rewrite each memories fragment whose rows are not in (org, user, created_at) order, sorted.

        Recall reads one user's rows. Writes arrive interleaved across users, so after compaction
        those rows lie one per page; sorted, they lie together and the read touches a few pages
        (at 100k memories it halved the search; benchmarks/recall_latency.py). Each fragment is
        replaced in a Lance `Rewrite` commit: the same rows, reordered. Lance refuses that commit
        when an update or delete touched the fragment meanwhile, so nothing is lost or brought
        back (the fragment is tried again, then left to the next run); appends commit alongside.
        A fragment is sorted in memory: compaction keeps them at most about a million rows.
        """
        import lance
        from lance import LanceOperation

        done = {"fragments": 0, "rows": 0, "conflicts": 0}
        table = self.tables.table(sc.MEMORIES)
        for _ in range(attempts):
            dataset = table.to_lance()
            pending = [f for f in dataset.get_fragments() if not in_owner_order(f.to_table(columns=CLUSTER_ORDER))]
            if not pending:
                break
            for fragment in pending:
                rows = fragment.to_table().sort_by([(column, "ascending") for column in CLUSTER_ORDER])
                new = lance.fragment.write_fragments(
                    rows, dataset, schema=dataset.schema, storage_options=self.tables.storage_options
                )
                group = LanceOperation.RewriteGroup(old_fragments=[fragment.metadata], new_fragments=new)
                try:
                    lance.LanceDataset.commit(
                        dataset, LanceOperation.Rewrite([group], []), read_version=dataset.version,
                        storage_options=self.tables.storage_options, max_retries=0,
                    )
                except Exception as exc:  # noqa: BLE001 - lance raises its own conflict types
                    if "conflict" not in str(exc).lower():
                        raise
                    done["conflicts"] += 1
                    break  # the dataset moved on: reopen it and look again
                done["fragments"] += 1
                done["rows"] += rows.num_rows
                dataset = table.to_lance()
            else:
                break
        return done

    def stats(self, scope: OrgScope | None = None) -> dict[str, Any]:
        """Counts per table, and per memory type and status, for one org or all (None)."""
        return store_stats(self.tables, scope)


def recorded(tables: Tables) -> sc.TableMetadata:
    """What the schema metadata of `memories` records at its latest version (model, layout, gloss)."""
    return sc.TableMetadata.of(tables.table(sc.MEMORIES).to_lance().schema.metadata)


def in_owner_order(keys: pa.Table) -> bool:
    """Whether a fragment's (org, user, created_at) keys are already sorted."""
    if keys.num_rows < 2:
        return True
    return keys.sort_by([(column, "ascending") for column in CLUSTER_ORDER]).equals(keys)


def store_stats(tables: Tables, scope: OrgScope | None) -> dict[str, Any]:
    """Counts per table, and per memory type and status, for one org or all (None)."""
    out: dict[str, Any] = {"uri": tables.uri, "embedding_model": tables.embedding_model,
                           "embedding_dim": tables.embedding_dim, "chinese_gloss": sc.gloss_name(recorded(tables).chinese_gloss),
                           "tables": {}}
    for name in sc.TABLES:
        out["tables"][name] = tables.shape(name)
    table = tables.table(sc.MEMORIES)
    scan = table.search()
    if scope is not None:
        scan = scan.where(scoped(scope).render())
    rows = scan.select(["user_id", "memory_type", "status"]).limit(None).to_arrow().to_pylist()
    by_type: dict[str, int] = defaultdict(int)
    by_status: dict[str, int] = defaultdict(int)
    for r in rows:
        by_type[r["memory_type"]] += 1
        by_status[r["status"]] += 1
    out["memories"] = {
        "total": len(rows), "users": len({r["user_id"] for r in rows}),
        "by_type": dict(by_type), "by_status": dict(by_status),
    }
    return out
