// One memory: what it says, its history (the audit events), where it came from (source turns, the
// job), what it superseded or merged, and the changes a key's role allows: restore, edit, delete,
// feedback.
import { api } from "./api.js";
import { append, facts, fill, h, jsonView, num, route, table, when } from "./dom.js";
import { act, field, heading, notice, problem, select } from "./ui.js";

export async function render(view, { segments, refresh, go }) {
  const [, userId, , memoryId] = segments;
  const trail = [["Users", "#/users"], [`User ${userId}`, route("user", userId)]];
  append(view, ...heading(`Memory ${memoryId}`, trail));
  const [memory, history] = await Promise.allSettled([api.memory(userId, memoryId), api.history(userId, memoryId)]);
  const events = history.status === "fulfilled" ? history.value.events : [];
  const out = h("div", { class: "outcome", "aria-live": "polite" });
  if (memory.status === "rejected") {
    append(view, problem(memory.reason));
  } else {
    const m = memory.value;
    append(view, 
      h("blockquote", { class: "memory-content" }, m.content),
      details(m, userId),
      out,
      actions(m, userId, out, refresh, go),
      h("section", { "aria-label": "Where it came from" }, h("h2", {}, "Where it came from"), origins(m, userId, events)),
      h("section", { "aria-label": "Superseded and merged" }, h("h2", {}, "Superseded and merged"), lineage(m, userId, events)),
    );
  }
  append(view, h("section", { "aria-label": "History" }, h("h2", {}, "History"),
    history.status === "rejected" ? problem(history.reason) : historyTable(events)));
}

function details(m, userId) {
  return facts([
    ["Type", m.memory_type], ["Status", h("span", { class: `status ${m.status}` }, m.status)],
    ["Superseded by", m.superseded_by ? h("a", { href: route("user", userId, "memory", m.superseded_by) }, m.superseded_by) : undefined],
    ["Importance", importance(m)], ["Confidence", num(m.confidence, 3)],
    ["Visibility", m.visibility], ["Agent", m.agent_id], ["Team", m.team_id],
    ["Session", m.session_id], ["Created", when(m.created_at)], ["Updated", when(m.updated_at)],
    ["Valid", `${when(m.valid_from)} → ${m.valid_to ? when(m.valid_to) : "now"}`],
    ["Expires", m.expires_at ? when(m.expires_at) : undefined],
    ["Recalled", `${m.access_count ?? 0} times${m.last_accessed_at ? `, last ${when(m.last_accessed_at)}` : ""}`],
    ["Metadata", jsonView(m.metadata)],
  ]);
}

function importance(m) {
  if (m.effective_importance === undefined || m.effective_importance === null) return num(m.importance, 3);
  const offset = m.feedback_offset ?? 0;
  return `${num(m.importance, 3)}; weighed in recall now: ${num(m.effective_importance, 3)}` +
    (offset ? ` (feedback ${offset > 0 ? "+" : ""}${num(offset, 3)} as of ${when(m.feedback_at)}, fading)` : "");
}

function actions(m, userId, out, refresh, go) {
  const done = (text) => refresh(text);
  const restore = h("button", { type: "button", onclick: () => act(restore, out, async () => {
    await api.restore(userId, m.id);
    done("Restored: the memory is active again.");
  }) }, "Restore");

  const content = h("textarea", { name: "content", rows: 3, value: m.content });
  const type = select("memory_type", ["episodic", "semantic", "procedural"], m.memory_type);
  const importance = h("input", { type: "number", name: "importance", min: 0, max: 1, step: 0.05, value: m.importance });
  const save = h("button", { type: "submit" }, "Save changes");
  const edit = h("details", { class: "edit" }, h("summary", {}, "Edit"),
    h("form", { onsubmit: (e) => {
      e.preventDefault();
      const change = {};
      if (content.value !== m.content) change.content = content.value;
      if (type.value !== m.memory_type) change.memory_type = type.value;
      if (Number(importance.value) !== m.importance) change.importance = Number(importance.value);
      if (!Object.keys(change).length) { fill(out, notice("Nothing changed.")); return; }
      act(save, out, async () => { await api.patch(userId, m.id, change); done("Saved."); });
    } }, field("Content", content), field("Type", type), field("Importance (0 to 1)", importance), save));

  const confirmDelete = h("button", { type: "button", class: "danger", hidden: true, onclick: () =>
    act(confirmDelete, out, async () => {
      await api.remove(userId, m.id);
      go(route("user", userId), `Deleted memory ${m.id}.`);
    }) }, "Yes, delete it");
  const remove = h("button", { type: "button", class: "danger", onclick: () => {
    confirmDelete.hidden = false;
    confirmDelete.focus();
  } }, "Delete");

  const signal = select("signal", [["useful", "useful"], ["wrong", "wrong"], ["outdated", "outdated (expires it)"]], "useful");
  const note = h("input", { type: "text", name: "note", maxlength: 500 });
  const send = h("button", { type: "submit" }, "Send feedback");
  const feedback = h("form", { class: "inline feedback", "aria-label": "Feedback on this memory", onsubmit: (e) => {
    e.preventDefault();
    act(send, out, async () => {
      const body = { signal: signal.value };
      if (note.value.trim()) body.note = note.value.trim();
      const now = await api.feedback(userId, m.id, body);
      const weight = now.effective_importance ?? now.importance;
      done(`Feedback “${signal.value}” recorded: weighed ${num(weight, 3)} in recall, status ${now.status}.`);
    });
  } }, field("Feedback signal", signal), field("Note (optional)", note), send);

  return h("section", { class: "actions", "aria-label": "Actions" },
    h("div", { class: "buttons" }, m.status === "superseded" || m.status === "expired" ? restore : null,
      remove, confirmDelete),
    feedback, edit);
}

function origins(m, userId, events) {
  const out = h("div", {});
  const absorbed = new Set(events.flatMap((e) => e.after?.absorbed ?? []));
  const turns = (m.source_ids ?? []).filter((id) => !absorbed.has(id));
  const jobs = [...new Set(events.map((e) => e.job_id ?? e.after?.job_id).filter(Boolean))];
  const created = events.find((e) => e.action === "created");
  append(out, facts([
    ["Stored by", created ? `${created.actor}, ${when(created.created_at)}` : "—"],
    ["Job", jobs.length ? jobs.map((id) => h("a", { href: route("job", id) }, id)) : "—"],
    ["Source turns", turns.length ? `${turns.length}` : "none (written directly)"],
  ]));
  if (turns.length && m.session_id) {
    const list = h("ol", { class: "turns" }, h("li", { class: "muted" }, "Loading the session's turns…"));
    append(out, list);
    api.sessionMessages(userId, m.session_id).then((answer) => {
      const wanted = new Set(turns);
      const found = answer.messages.filter((t) => wanted.has(t.message_id));
      fill(list, ...(found.length ? found.map((t) => h("li", {}, h("span", { class: "role" }, t.role), " ",
        h("span", { class: "muted" }, when(t.created_at)), h("p", {}, t.content)))
        : [h("li", { class: "muted" }, `Not among the session's latest turns: ${turns.join(", ")}`)]));
    }, (error) => fill(list, h("li", {}, problem(error))));
  } else if (turns.length) {
    append(out, h("p", { class: "muted ids" }, `Turns ${turns.join(", ")} (no session recorded).`));
  }
  return out;
}

function lineage(m, userId, events) {
  const link = (id) => h("a", { href: route("user", userId, "memory", id) }, id);
  const merged = [...new Set(events.flatMap((e) => e.after?.absorbed ?? []))];
  const out = h("div", {}, facts([
    ["Merged from", merged.length ? h("ul", {}, merged.map((id) => h("li", {}, link(id)))) : "nothing"],
    ["Superseded by", m.superseded_by ? link(m.superseded_by) : "nothing"],
  ]));
  const replaced = h("p", { class: "muted" }, "Looking for what it replaced…");
  append(out, replaced);
  api.memories({ user_id: userId, status: "superseded", limit: 1000 }).then((page) => {
    const older = page.memories.filter((o) => o.superseded_by === m.id && !merged.includes(o.id));
    fill(replaced, older.length ? h("span", {}, "It superseded: ", older.map((o, i) =>
      [i ? ", " : "", link(o.id), ` (“${o.content}”)`])) : "It superseded no other memory.");
  }, (error) => fill(replaced, problem(error)));
  return out;
}

function historyTable(events) {
  if (!events.length) return h("p", { class: "muted" }, "No events.");
  return table("Audit events, oldest first", ["When", "Action", "By", "Change"], events.map((e) => [
    when(e.created_at), h("span", { class: `action ${e.action}` }, e.action), e.actor, change(e),
  ]));
}

function change(e) {
  const keys = [...new Set([...Object.keys(e.before ?? {}), ...Object.keys(e.after ?? {})])];
  if (!keys.length) return "—";
  return h("ul", { class: "change" }, keys.map((k) => h("li", {}, h("span", { class: "key" }, k), ": ",
    k in (e.before ?? {}) ? [short(e.before[k]), " → "] : null, k in (e.after ?? {}) ? short(e.after[k]) : "(removed)")));
}

function short(value) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > 300 ? `${text.slice(0, 300)}…` : text;
}
