// A user's memories: filters (type, status, agent, team, session), the order of a page, paging,
// and a search that shows each hit's hybrid score and its parts.
import { api } from "./api.js";
import { append, fill, h, num, route, table, when, withQuery } from "./dom.js";
import { field, heading, pager, problem, select } from "./ui.js";

const TYPES = [["", "any type"], "episodic", "semantic", "procedural"];
const STATUSES = ["active", "superseded", "expired", "all"];
const ORDERS = [["newest", "newest first"], ["oldest", "oldest first"], ["importance", "most important first"],
                ["recalled", "most recalled first"]];
const PARTS = ["semantic", "keyword", "recency", "importance"];
// The filters of the list, each with the memory field it matches.
const FILTERS = { type: "memory_type", agent: "agent_id", team: "team_id", session: "session_id" };

export async function render(view, { segments, params, go }) {
  const userId = segments[1];
  const state = Object.fromEntries(["type", "status", "agent", "team", "session", "order", "q", "cursor"]
    .map((k) => [k, params.get(k) ?? ""]));
  state.status ||= "active";
  state.order ||= "newest";
  const here = route("user", userId);
  const link = (changes) => withQuery(here, { ...state, cursor: "", ...changes });

  const query = h("input", { type: "search", name: "q", value: state.q, autocomplete: "off" });
  const controls = {
    type: select("type", TYPES, state.type), status: select("status", STATUSES, state.status),
    agent: h("input", { type: "text", name: "agent", value: state.agent }),
    team: h("input", { type: "text", name: "team", value: state.team }),
    session: h("input", { type: "text", name: "session", value: state.session }),
    order: select("order", ORDERS, state.order),
  };
  const values = () => Object.fromEntries(Object.entries(controls).map(([k, c]) => [k, c.value.trim()]));
  const hits = h("section", { class: "hits", "aria-label": "Search results" });
  const list = h("section", { class: "list", "aria-label": "Memories" }, h("p", { class: "muted" }, "Loading memories…"));

  append(view, 
    ...heading(`User ${userId}`, [["Users", "#/users"]]),
    h("p", { class: "links" },
      h("a", { class: "button", href: route("user", userId, "timeline") }, "Timeline"),
      h("a", { class: "button danger", href: route("user", userId, "erase") }, "Erase this user")),
    h("form", { role: "search", class: "inline", onsubmit: (e) => {
      e.preventDefault();
      go(link({ ...values(), q: query.value.trim() }));
    } }, field("Search this user's memories", query), h("button", { type: "submit" }, "Search")),
    hits,
    h("form", { class: "filters", "aria-label": "Filters", onsubmit: (e) => {
      e.preventDefault();
      go(link(values()));
    } },
      field("Type", controls.type), field("Status", controls.status), field("Agent", controls.agent),
      field("Team", controls.team), field("Session", controls.session), field("Order", controls.order),
      h("button", { type: "submit" }, "Apply filters")),
    list,
  );

  const listing = showList(list, userId, state, link);
  if (state.q) await showHits(hits, userId, state);
  await listing;
}

async function showList(out, userId, state, link) {
  let page;
  try {
    page = await api.memories({
      user_id: userId, limit: 50, cursor: state.cursor, status: state.status,
      memory_type: state.type, agent_id: state.agent, team_id: state.team, session_id: state.session,
    });
  } catch (error) {
    fill(out, problem(error));
    return;
  }
  const all = page.memories ?? [];
  // Filters the server left to the page are applied to it here (and change nothing where it did apply them).
  const shown = order(all.filter((m) => Object.entries(FILTERS).every(([k, f]) => !state[k] || m[f] === state[k])),
    state.order);
  const rows = shown.map((m) => [
    h("a", { href: route("user", userId, "memory", m.id), class: "content" }, m.content),
    m.memory_type, h("span", { class: `status ${m.status}` }, m.status), num(m.importance, 2), when(m.created_at),
    where(m),
  ]);
  fill(out, 
    rows.length ? table(`Memories (${state.status})`, ["Memory", "Type", "Status", "Importance", "Created", "From"], rows)
      : h("p", { class: "muted" }, "No memory matches on this page."),
    shown.length < all.length ? h("p", { class: "muted" }, `${shown.length} of this page's ${all.length} match the filters.`) : null,
    pager(state.cursor ? link({}) : null, page.next_cursor ? link({ cursor: page.next_cursor }) : null),
  );
}

function order(memories, how) {
  const by = {
    newest: null,
    oldest: (a, b) => String(a.created_at).localeCompare(String(b.created_at)),
    importance: (a, b) => b.importance - a.importance,
    recalled: (a, b) => (b.access_count ?? 0) - (a.access_count ?? 0),
  }[how];
  return by ? [...memories].sort(by) : memories;
}

function where(m) {
  const parts = [["agent", m.agent_id], ["team", m.team_id], ["session", m.session_id],
                 ["visibility", m.visibility]].filter(([, v]) => v);
  return parts.length ? parts.map(([k, v]) => `${k} ${v}`).join(", ") : "—";
}

async function showHits(out, userId, state) {
  fill(out, h("p", { class: "muted" }, "Searching…"));
  const body = { user_id: userId, query: state.q, top_k: 20, min_score: 0 };
  if (state.type) body.memory_types = [state.type];
  if (state.agent) body.agent_id = state.agent;
  if (state.team) body.team_id = state.team;
  if (state.session) body.session_id = state.session;
  let result;
  try {
    result = await api.search(body);
  } catch (error) {
    fill(out, problem(error));
    return;
  }
  const rows = result.memories.map((hit) => [
    h("a", { href: route("user", userId, "memory", hit.id), class: "content" }, hit.content),
    h("strong", {}, num(hit.score)),
    PARTS.map((p) => part(p, hit.scores?.[p])),
  ]);
  fill(out, 
    h("h2", {}, `Search: “${state.q}”`),
    result.degraded ? h("p", { class: "notice" }, "Keywords only: the embedding model did not answer.") : null,
    rows.length ? table("Hits, best first (active memories)", ["Memory", "Score", "Parts"], rows)
      : h("p", { class: "muted" }, "No memory answers this search."),
  );
}

function part(name, value) {
  return h("span", { class: "part" }, h("span", { class: "part-name" }, name), " ",
    h("meter", { min: 0, max: 1, value: value ?? 0, "aria-label": name }), " ", num(value));
}
