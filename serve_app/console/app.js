// The console's entry: sign-in, the address (after `#`) to page, and what pages share.
import { ApiError, api, session } from "./api.js";
import { append, fill, h } from "./dom.js";
import { renderJob, renderList as renderJobs } from "./jobs.js";
import * as erase from "./erase.js";
import * as memory from "./memory.js";
import * as memories from "./memories.js";
import * as timeline from "./timeline.js";
import { field, notice, problem } from "./ui.js";
import * as users from "./users.js";

// Each route: its segments (`:x` takes any one) and the page that renders it.
const ROUTES = [
  [["users"], users.render, "Users"],
  [["user", ":id"], memories.render, "Memories"],
  [["user", ":id", "memory", ":id"], memory.render, "Memory"],
  [["user", ":id", "timeline"], timeline.render, "Timeline"],
  [["user", ":id", "erase"], erase.render, "Erase a user"],
  [["jobs"], renderJobs, "Jobs"],
  [["job", ":id"], renderJob, "Job"],
];

const main = document.getElementById("main");
const who = document.getElementById("who");
const signOut = document.getElementById("sign-out");
let flash = null; // a notice for the next page shown (after a change)

function parse() {
  const [path, query = ""] = location.hash.replace(/^#\/?/, "").split("?");
  const segments = path.split("/").filter(Boolean).map((s) => decodeURIComponent(s));
  return { segments, params: new URLSearchParams(query) };
}

function match(segments) {
  return ROUTES.find(([pattern]) => pattern.length === segments.length
    && pattern.every((p, i) => p.startsWith(":") || p === segments[i]));
}

/** Show the page of the current address. */
async function show() {
  const { segments, params } = parse();
  const view = h("section", { class: "page" });
  fill(main, view);
  header();
  if (!session.signedIn) {
    signIn(view);
    return;
  }
  if (!segments.length) {
    replace("#/users");
    segments.push("users");
  }
  const found = match(segments);
  if (!found) {
    append(view, h("h1", {}, "Not found"), h("p", {}, "No page at this address. "), h("a", { href: "#/users" }, "Users"));
    return;
  }
  const [, render, title] = found;
  document.title = `${title} · agent-memory console`;
  if (flash) {
    append(view, notice(flash));
    flash = null;
  }
  for (const link of document.querySelectorAll("header nav a")) {
    link.toggleAttribute("aria-current", link.getAttribute("href") === `#/${segments[0]}` ||
      (segments[0] === "user" && link.getAttribute("href") === "#/users") ||
      (segments[0] === "job" && link.getAttribute("href") === "#/jobs"));
  }
  const context = {
    segments, params,
    go: (hash, text) => { flash = text ?? null; if (hash === location.hash) show(); else location.hash = hash; },
    refresh: (text) => { flash = text ?? null; show(); },
    replace,
  };
  try {
    await render(view, context);
  } catch (error) {
    if (view.isConnected) append(view, problem(error));
  }
  if (view.isConnected) {
    // The page shows what it asked for: a mark the browser's own performance timeline keeps
    // (docs/console.md measures the first page of memories with it).
    view.dataset.ready = "true";
    performance.mark("console:page-ready", { detail: location.hash });
  }
}

function replace(hash) {
  history.replaceState(null, "", hash);
}

function header() {
  const signedIn = session.signedIn;
  signOut.hidden = !signedIn;
  who.textContent = signedIn ? (session.key ? "Signed in with an API key" : "Signed in (no key)") : "Not signed in";
}

function signIn(view) {
  document.title = "Sign in · agent-memory console";
  const key = h("input", { type: "password", name: "key", autocomplete: "off", spellcheck: "false" });
  const out = h("div", { "aria-live": "polite" });
  const button = h("button", { type: "submit" }, "Sign in");
  append(view, 
    h("h1", { tabindex: "-1" }, "Sign in"),
    h("p", {}, "The console acts with an API key, as any client does: what the key's role allows, and nothing more. " +
      "It is kept in this tab only (session storage) and sent to this server alone."),
    h("form", { class: "signin", onsubmit: async (e) => {
      e.preventDefault();
      button.disabled = true;
      const value = key.value.trim();
      session.signIn(value);
      try {
        await api.schedule(); // any call a reader may make: tells a key the server accepts
        key.value = "";
        show();
      } catch (error) {
        session.signOut();
        fill(out, problem(error instanceof ApiError && error.status === 401
          ? new ApiError(401, error.code, `${error.message}. Check the key (agent-memory keys create).`) : error));
      } finally {
        button.disabled = false;
      }
    } }, field("API key", key, "Leave empty on a local server that has no API keys."), button),
    out,
  );
  key.focus();
}

signOut.addEventListener("click", () => {
  session.signOut();
  show();
});
window.addEventListener("hashchange", show);
show();
