// Erase a user: everything of theirs, unrecoverably, after the operator types the user's id; then
// the receipt (the purge job's report), followed until the job ends.
import { api } from "./api.js";
import { append, facts, fill, h, jsonView, route } from "./dom.js";
import { jobView } from "./jobs.js";
import { act, field, heading, problem } from "./ui.js";

const POLL_MS = 1000;

export async function render(view, { segments, go }) {
  const userId = segments[1];
  const typed = h("input", { type: "text", name: "confirm", autocomplete: "off", spellcheck: "false" });
  const button = h("button", { type: "submit", class: "danger", disabled: true }, "Erase this user");
  const out = h("div", { class: "outcome", "aria-live": "polite" });
  typed.addEventListener("input", () => { button.disabled = typed.value !== userId; });
  append(view, 
    ...heading(`Erase ${userId}`, [["Users", "#/users"], [`User ${userId}`, route("user", userId)]]),
    h("p", { class: "warning" }, "Erasing removes every memory, turn and event of this user from every read at once, " +
      "then their bytes from every file of the store. It cannot be undone. It needs an admin key."),
    h("form", { class: "inline", "aria-label": "Confirm the erasure", onsubmit: (e) => {
      e.preventDefault();
      if (typed.value !== userId) return;
      act(button, out, async () => {
        const erased = await api.erase(userId);
        typed.disabled = true;
        button.disabled = true;
        await follow(out, erased, go);
      }).finally(() => { if (typed.disabled) button.disabled = true; });
    } }, field(`Type the user id (${userId}) to confirm`, typed), button),
    out,
  );
}

async function follow(out, erased, go) {
  const receipt = h("div", {}, h("p", { class: "muted" }, "Purging the user's bytes from the store's files…"));
  fill(out, 
    h("h2", {}, "Erased"),
    facts([["Rows deleted", jsonView(erased.erased)], ["Purge job", h("a", { href: route("job", erased.job_id) }, erased.job_id)]]),
    receipt,
  );
  while (out.isConnected) {
    let job;
    try {
      job = await api.job(erased.job_id);
    } catch (error) {
      fill(receipt, problem(error));
      return;
    }
    fill(receipt, ...jobView(job, go));
    if (job.state === "succeeded" || job.state === "failed") return;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
