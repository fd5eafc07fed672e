// What every page shows the same way: errors from the server, notices, paging, form fields.
import { ApiError } from "./api.js";
import { fill, h } from "./dom.js";

/** The server's refusal or error, shown as it said it (status, code, message). */
export function problem(error) {
  const text = error instanceof ApiError ? error.summary : `Error: ${error?.message ?? error}`;
  return h("p", { class: "problem", role: "alert" }, text);
}

/** A short line saying what happened (announced to screen readers). */
export function notice(text) {
  return h("p", { class: "notice", role: "status" }, text);
}

let fields = 0;

/** A labelled form field: `control` is an input, select or textarea made with h(); `hint` describes it. */
export function field(label, control, hint) {
  const id = control.id || `field-${++fields}`;
  control.id = id;
  if (hint) control.setAttribute("aria-describedby", `${id}-hint`);
  return h("div", { class: "field" }, h("label", { class: "label", for: id }, label), control,
    hint ? h("span", { class: "hint", id: `${id}-hint` }, hint) : null);
}

/** A select of `options` (`[value, label]` pairs or plain values) with `value` selected. */
export function select(name, options, value) {
  return h("select", { name },
    options.map((o) => {
      const [v, label] = Array.isArray(o) ? o : [o, o];
      return h("option", { value: v, selected: v === value }, label);
    }));
}

/** A page's heading, with the route trail above it. */
export function heading(title, trail = []) {
  return [
    trail.length ? h("nav", { class: "trail", "aria-label": "Breadcrumb" },
      trail.map(([label, href]) => [h("a", { href }, label), h("span", { "aria-hidden": "true" }, " / ")])) : null,
    h("h1", { tabindex: "-1" }, title),
  ];
}

/** Paging links: to the first page (null when on it) and to the next (null on the last). */
export function pager(first, next) {
  return h("nav", { class: "pager", "aria-label": "Pages" },
    first ? h("a", { class: "button", href: first }, "First page") : null,
    next ? h("a", { class: "button", href: next }, "Next page") : h("span", { class: "muted" }, "Last page"));
}

/** Run `work` from a button: disabled while it runs; its error shown in `out` (and returned). */
export async function act(button, out, work) {
  button.disabled = true;
  try {
    return await work();
  } catch (error) {
    fill(out, problem(error));
    return undefined;
  } finally {
    button.disabled = false;
  }
}
