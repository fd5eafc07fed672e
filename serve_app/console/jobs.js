// Jobs: imports, conversations, consolidation runs and erasures, with their progress, reports and
// receipts; a consolidation dry run whose merges can be read before a real run applies them.
import { api } from "./api.js";
import { append, facts, fill, h, jsonView, num, route, table, when, withQuery } from "./dom.js";
import { act, field, heading, pager, problem, select } from "./ui.js";

const KINDS = [["", "any kind"], "import", "conversation", "consolidation", "erasure"];
const STATES = [["", "any state"], "queued", "running", "succeeded", "failed"];
const POLL_MS = 1000;

export async function renderList(view, { params, go }) {
  const kind = params.get("kind") ?? "";
  const state = params.get("state") ?? "";
  const cursor = params.get("cursor");
  const kindSelect = select("kind", KINDS, kind);
  const stateSelect = select("state", STATES, state);
  const results = h("div", {}, h("p", { class: "muted" }, "Loading jobs…"));
  append(view, 
    ...heading("Jobs"),
    dryRunForm(go),
    h("form", { class: "filters", "aria-label": "Filters", onsubmit: (e) => {
      e.preventDefault();
      go(withQuery("#/jobs", { kind: kindSelect.value, state: stateSelect.value }));
    } }, field("Kind", kindSelect), field("State", stateSelect), h("button", { type: "submit" }, "Show jobs")),
    results,
  );
  let page;
  try {
    page = await api.jobs({ kind, state, limit: 50, cursor });
  } catch (error) {
    fill(results, problem(error));
    return;
  }
  const jobs = page.jobs ?? [];
  fill(results, 
    jobs.length ? table("Jobs, newest first", ["Job", "Kind", "State", "Progress", "Submitted", "Updated"], jobs.map((j) => [
      h("a", { href: route("job", j.id) }, j.id), label(j), h("span", { class: `state ${j.state}` }, j.state),
      progress(j), when(j.created_at), when(j.updated_at),
    ])) : h("p", { class: "muted" }, "No job matches."),
    pager(cursor ? withQuery("#/jobs", { kind, state }) : null,
      page.next_cursor ? withQuery("#/jobs", { kind, state, cursor: page.next_cursor }) : null),
  );
}

function dryRunForm(go) {
  const user = h("input", { type: "text", name: "user_id", autocomplete: "off" });
  const out = h("div", { "aria-live": "polite" });
  const button = h("button", { type: "submit" }, "Start a consolidation dry run");
  return h("form", { class: "inline", "aria-label": "Consolidation dry run", onsubmit: (e) => {
    e.preventDefault();
    act(button, out, async () => {
      const body = { dry_run: true };
      if (user.value.trim()) body.user_id = user.value.trim();
      const started = await api.consolidate(body);
      go(withQuery(route("job", started.job_id), { user: body.user_id }));
    });
  } }, field("User (empty: the whole org)", user), button, out);
}

export async function renderJob(view, { segments, params, go }) {
  const jobId = segments[1];
  const user = params.get("user");
  append(view, ...heading(`Job ${jobId}`, [["Jobs", "#/jobs"]]));
  const body = h("div", {}, h("p", { class: "muted" }, "Loading the job…"));
  append(view, body);
  // Followed until it ends, while the page is shown.
  while (view.isConnected) {
    let job;
    try {
      job = await api.job(jobId);
    } catch (error) {
      fill(body, problem(error));
      return;
    }
    fill(body, ...jobView(job, go, user));
    if (job.state === "succeeded" || job.state === "failed") return;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** A job's state, progress and report, as the job page and the erasure page show it. */
export function jobView(job, go, user) {
  const report = job.report ?? {};
  const dryRun = job.kind === "consolidation" && (report.dry_run || Array.isArray(report.clusters));
  return [
    facts([
      ["Kind", label(job)], ["State", h("span", { class: `state ${job.state}` }, job.state)],
      ["Progress", progress(job)], ["Submitted", when(job.created_at)], ["Updated", when(job.updated_at)],
      ["Error", job.error ? h("span", { class: "problem" }, job.error) : undefined],
    ]),
    dryRun ? merges(report, job, go, user) : null,
    h("section", { "aria-label": job.kind === "erasure" ? "Receipt" : "Report" },
      h("h2", {}, job.kind === "erasure" ? "Receipt" : "Report"),
      job.report ? jsonView(dryRun ? withoutClusters(report) : report) : h("p", { class: "muted" }, "No report yet.")),
  ];
}

function merges(report, job, go, user) {
  const clusters = report.clusters ?? [];
  const out = h("div", { "aria-live": "polite" });
  // The user the dry run was for: as the console started it, or the one user its merges are of.
  const owner = user || (report.users === 1 && clusters.length ? clusters[0].user_id : null);
  const apply = h("button", { type: "button", onclick: () => act(apply, out, async () => {
    const body = owner ? { user_id: owner } : {};
    const started = await api.consolidate(body);
    go(route("job", started.job_id));
  }) }, "Apply: run consolidation for real");
  return h("section", { class: "merges", "aria-label": "Merges it would make" },
    h("h2", {}, `Merges it would make: ${clusters.length}`),
    h("p", { class: "muted" }, "A dry run changes nothing. Read the merges, then apply them with a real run " +
      "(which plans again over the memories as they are then)."),
    clusters.length ? h("ol", { class: "clusters" }, clusters.map((c) => h("li", {},
      h("p", {}, h("strong", {}, "Keeps: "), c.canonical?.content ?? c.canonical_text ?? c.canonical ?? "—"),
      c.user_id ? h("p", { class: "muted" }, `User ${c.user_id}`) : null,
      c.why || c.reason ? h("p", { class: "muted" }, `Why: ${c.why ?? c.reason}`) : null,
      (c.links ?? []).length ? h("ul", { class: "muted" }, c.links.map((l) => h("li", {}, `${l.a} and ${l.b}: ${l.reason}`)))
        : null,
      h("ul", {}, (c.members ?? []).map((m) => h("li", {},
        c.user_id ? h("a", { href: route("user", c.user_id, "memory", m.id) }, m.id) : m.id, ": ",
        m.content ?? m.text ?? ""))))))
      : h("p", {}, "Nothing to merge."),
    job.state === "succeeded" ? [h("p", {}, owner ? `Applying runs consolidation for user ${owner}.`
      : "Applying runs consolidation for the whole org."), apply, out] : null);
}

function withoutClusters(report) {
  const { clusters, ...rest } = report;
  return { ...rest, clusters: `${clusters?.length ?? 0} (above)` };
}

function label(job) {
  const dry = job.kind === "consolidation" && job.report?.dry_run ? " (dry run)" : "";
  return `${job.kind}${dry}`;
}

function progress(job) {
  return h("span", { class: "progress" }, h("progress", { max: 1, value: job.progress ?? 0, "aria-label": "Progress" }),
    ` ${num((job.progress ?? 0) * 100, 0)}%`);
}
