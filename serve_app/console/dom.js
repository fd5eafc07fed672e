// Building the page: every element is made here, every text is set as text (never as markup), so
// what the API answers (a memory's content, a user id) can never become a tag or a script.

/** An element `tag` with `props` and `children` (strings become text nodes; null and false are skipped). */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name in PROPERTIES) el[PROPERTIES[name]] = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, ...children);
  return el;
}

// Set as properties, not attributes: their live value is what a form reads.
const PROPERTIES = { value: "value", checked: "checked", selected: "selected", disabled: "disabled" };

/** Append `children` (nested arrays flattened; strings and numbers as text; null and false skipped,
 * where the DOM's own `append` would show them as the text "null" and "false"). */
export function append(el, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace what `el` holds with `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, ...children);
}

/** An SVG element (the timeline's axis). */
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") el.setAttribute("class", value);
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** A link inside the console: `parts` joined as a route, each escaped as one path segment. */
export function route(...parts) {
  return "#/" + parts.map((p) => encodeURIComponent(p)).join("/");
}

/** A route with a query string of the non-empty `params`. */
export function withQuery(hash, params) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") query.set(k, v);
  const text = query.toString();
  return text ? `${hash}?${text}` : hash;
}

/** A time as `YYYY-MM-DD HH:MM:SS UTC`, or a dash. */
export function when(value) {
  if (!value) return "—";
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) return String(value);
  return date.toISOString().slice(0, 19).replace("T", " ") + " UTC";
}

/** A number with at most `digits` decimals. */
export function num(value, digits = 3) {
  return typeof value === "number" ? String(Number(value.toFixed(digits))) : "—";
}

/** A table whose cells wrap; on narrow screens each row becomes a card, every cell labelled. */
export function table(caption, columns, rows) {
  return h("table", { class: "rows" },
    caption ? h("caption", {}, caption) : null,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map((cells) => h("tr", {},
      cells.map((cell, i) => h("td", { "data-label": columns[i] }, cell))))),
  );
}

/** A definition list of `[term, value]` pairs (values as given: text or nodes). */
export function facts(pairs) {
  return h("dl", { class: "facts" },
    pairs.filter(([, v]) => v !== undefined).map(([term, value]) => [h("dt", {}, term), h("dd", {}, value ?? "—")]));
}

/** Any JSON value as nested lists of text (a job's report, an event's fields). */
export function jsonView(value) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "none");
  if (Array.isArray(value)) {
    if (value.length === 0) return h("span", { class: "muted" }, "[]");
    if (value.every((v) => typeof v !== "object" || v === null)) return h("span", {}, value.map(String).join(", "));
    return h("ol", { class: "json" }, value.map((v) => h("li", {}, jsonView(v))));
  }
  if (typeof value === "object") {
    const entries = Object.entries(value);
    if (entries.length === 0) return h("span", { class: "muted" }, "{}");
    return h("dl", { class: "json" }, entries.map(([k, v]) => [h("dt", {}, k), h("dd", {}, jsonView(v))]));
  }
  return h("span", {}, String(value));
}
