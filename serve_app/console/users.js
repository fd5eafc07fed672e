// An org's users: search by id prefix, counts of memories by status and type, last activity, paging.
import { api } from "./api.js";
import { append, fill, h, route, table, when, withQuery } from "./dom.js";
import { field, heading, pager, problem } from "./ui.js";

export async function render(view, { params, go }) {
  const prefix = params.get("prefix") ?? "";
  const cursor = params.get("cursor");
  const search = h("input", { type: "search", name: "prefix", value: prefix, autocomplete: "off" });
  const open = h("input", { type: "text", name: "user_id", autocomplete: "off" });
  const results = h("div", { class: "results" }, h("p", { class: "muted" }, "Loading users…"));
  append(view, 
    ...heading("Users"),
    h("div", { class: "toolbar" },
      h("form", { role: "search", class: "inline", onsubmit: (e) => {
        e.preventDefault();
        go(withQuery("#/users", { prefix: search.value.trim() }));
      } }, field("User id starts with", search), h("button", { type: "submit" }, "Search users")),
      h("form", { class: "inline", onsubmit: (e) => {
        e.preventDefault();
        if (open.value.trim()) go(route("user", open.value.trim()));
      } }, field("Open a user by id", open), h("button", { type: "submit" }, "Open user"))),
    results,
  );
  let page;
  try {
    page = await api.users({ limit: 50, prefix, cursor });
  } catch (error) {
    fill(results, problem(error));
    return;
  }
  const users = page.users ?? [];
  const rows = users.map((u) => [
    h("a", { href: route("user", u.user_id) }, u.user_id),
    counts(u.memories, ["active", "superseded", "expired"]),
    counts(u.by_type, ["episodic", "semantic", "procedural"]),
    when(u.last_activity),
  ]);
  fill(results, 
    users.length ? table(prefix ? `Users whose id starts with “${prefix}”` : "Users, by id",
      ["User", "Memories", "By type", "Last activity"], rows)
      : h("p", { class: "muted" }, prefix ? `No user id starts with “${prefix}”.` : "This org has no users yet."),
    pager(cursor ? withQuery("#/users", { prefix }) : null,
      page.next_cursor ? withQuery("#/users", { prefix, cursor: page.next_cursor }) : null),
  );
}

function counts(values, names) {
  return h("ul", { class: "counts" }, names.map((n) => h("li", {}, h("strong", {}, String(values?.[n] ?? 0)), ` ${n}`)));
}
