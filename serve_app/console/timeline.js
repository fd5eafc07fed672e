// The timeline replay of a user: every change of their memories on a time axis, and a slider that
// shows what their memory held at any moment (the API's `as_of`). Erased content never appears:
// the server keeps none, and an event without content shows none.
import { api } from "./api.js";
import { append, fill, h, route, svg, table, when, withQuery } from "./dom.js";
import { heading, problem } from "./ui.js";

const MAX_PAGES = 20; // of 500 events: the replay covers a user's latest 10,000 changes at most
const WIDTH = 1000;

export async function render(view, { segments, params, replace }) {
  const userId = segments[1];
  append(view, ...heading(`Timeline of ${userId}`, [["Users", "#/users"], [`User ${userId}`, route("user", userId)]]));
  const status = h("p", { class: "muted" }, "Loading the timeline…");
  append(view, status);
  let events;
  try {
    events = await allEvents(userId);
  } catch (error) {
    status.replaceWith(problem(error));
    return;
  }
  if (!events.length) {
    status.replaceWith(h("p", {}, "No changes recorded: this user has no memories (or was erased)."));
    return;
  }
  const wanted = params.get("at");
  let index = events.length - 1;
  if (wanted) {
    const found = events.findLastIndex((e) => e.at <= wanted);
    index = found >= 0 ? found : 0;
  }
  const first = Date.parse(events[0].at);
  const span = Math.max(Date.parse(events.at(-1).at) - first, 1);
  const x = (e) => 10 + ((Date.parse(e.at) - first) / span) * (WIDTH - 20);

  const slider = h("input", { type: "range", min: 0, max: events.length - 1, step: 1, value: index,
    "aria-label": "Moment to replay", "aria-valuetext": when(events[index].at) });
  const moment = h("output", { class: "moment" });
  const cursor = svg("line", { x1: 0, x2: 0, y1: 2, y2: 58, class: "cursor" });
  const marks = events.map((e, i) => svg("circle", { cx: x(e), cy: 30, r: 6, class: `mark ${e.action}`,
    onclick: () => { slider.value = String(i); show(i); } }, svg("title", {}, `${when(e.at)} ${e.action}`)));
  const axis = svg("svg", { viewBox: `0 0 ${WIDTH} 60`, class: "axis", role: "img",
    "aria-label": `${events.length} changes from ${when(events[0].at)} to ${when(events.at(-1).at)}` },
    svg("line", { x1: 10, x2: WIDTH - 10, y1: 30, y2: 30, class: "baseline" }), marks, cursor);
  const held = h("section", { class: "held", "aria-label": "What the memory held" });
  const recent = h("section", { class: "recent", "aria-label": "Changes up to this moment" });

  status.replaceWith(
    h("p", {}, `${events.length} changes, ${when(events[0].at)} to ${when(events.at(-1).at)}.`),
    legend(events),
    h("figure", { class: "timeline" }, axis),
    h("label", { class: "field slider" }, h("span", { class: "label" }, "Replay to"), slider, moment),
    held, recent,
  );

  let asked = 0;
  let timer;
  function show(i) {
    const e = events[i];
    moment.value = `${when(e.at)} — ${e.action}`;
    moment.textContent = moment.value;
    slider.setAttribute("aria-valuetext", when(e.at));
    cursor.setAttribute("x1", x(e));
    cursor.setAttribute("x2", x(e));
    marks.forEach((m, j) => m.classList.toggle("current", j === i));
    fill(recent, h("h2", {}, "Changes up to this moment"), changes(events.slice(Math.max(0, i - 19), i + 1).reverse(), userId));
    clearTimeout(timer);
    const ask = ++asked;
    timer = setTimeout(async () => {
      replace(withQuery(route("user", userId, "timeline"), { at: e.at }));
      let page;
      try {
        page = await api.memories({ user_id: userId, as_of: e.at, limit: 200 });
      } catch (error) {
        if (ask === asked) fill(held, problem(error));
        return;
      }
      if (ask !== asked) return;
      const memories = page.memories ?? [];
      fill(held, h("h2", {}, `Held at ${when(e.at)}: ${memories.length}${page.next_cursor ? "+" : ""} memories`),
        memories.length ? h("ul", { class: "held-list" }, memories.map((m) => h("li", {},
          h("a", { href: route("user", userId, "memory", m.id) }, m.content), " ",
          h("span", { class: "muted" }, m.memory_type)))) : h("p", { class: "muted" }, "Nothing held at this moment."));
    }, 120);
  }
  slider.addEventListener("input", () => show(Number(slider.value)));
  show(index);
}

async function allEvents(userId) {
  const events = [];
  let cursor;
  for (let page = 0; page < MAX_PAGES; page++) {
    const answer = await api.timeline(userId, { limit: 500, cursor });
    events.push(...answer.events);
    cursor = answer.next_cursor;
    if (!cursor) break;
  }
  return events;
}

function detail(value) {
  return Object.entries(value).map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join("; ");
}

function legend(events) {
  const actions = [...new Set(events.map((e) => e.action))];
  return h("ul", { class: "legend", "aria-label": "Actions" },
    actions.map((a) => h("li", {}, h("span", { class: `swatch ${a}`, "aria-hidden": "true" }), a)));
}

function changes(events, userId) {
  return table(null, ["When", "Action", "Memory", "Content", "By"], events.map((e) => [
    when(e.at), h("span", { class: `action ${e.action}` }, e.action),
    e.memory_id ? h("a", { href: route("user", userId, "memory", e.memory_id) }, e.memory_id) : "—",
    [e.content ?? h("span", { class: "muted" }, "—"), e.detail ? h("div", { class: "muted" }, detail(e.detail)) : null],
    [e.actor ?? "—", e.job_id ? [" (job ", h("a", { href: route("job", e.job_id) }, e.job_id), ")"] : null],
  ]));
}
