// The public HTTP API, with the operator's key from this tab's session storage. Nothing else is
// called: what the key may see and do is what its role allows, and a refusal comes back as an
// ApiError carrying the server's status, code and message.

const KEY = "agent-memory.console.key";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }

  /** One line for people: the status, the server's code and its message. */
  get summary() {
    const label = { 401: "Not signed in", 403: "Refused", 404: "Not found", 409: "Conflict", 422: "Invalid",
                    429: "Too many requests", 503: "Unavailable" }[this.status] ?? "Error";
    return `${label} (${this.status} ${this.code}): ${this.message}`;
  }
}

export const session = {
  /** Whether this tab has signed in (with a key, or with none on a server without keys). */
  get signedIn() { return sessionStorage.getItem(KEY) !== null; },
  signIn(key) { sessionStorage.setItem(KEY, key); },
  signOut() { sessionStorage.removeItem(KEY); },
  get key() { return sessionStorage.getItem(KEY) ?? ""; },
};

/** Call the API: `query` becomes the query string (empty values left out), `body` JSON. */
export async function call(method, path, { query, body } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query ?? {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const headers = { Accept: "application/json" };
  if (session.key) headers.Authorization = `Bearer ${session.key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let answer;
  try {
    answer = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (error) {
    throw new ApiError(0, "network", `the server did not answer (${error.message})`);
  }
  const text = await answer.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!answer.ok) {
    const detail = data?.error ?? {};
    throw new ApiError(answer.status, detail.code ?? "error", detail.message ?? (text.slice(0, 200) || answer.statusText));
  }
  return data;
}

export const api = {
  schedule: () => call("GET", "/v1/schedule"),
  users: (query) => call("GET", "/v1/users", { query }),
  memories: (query) => call("GET", "/v1/memories", { query }),
  search: (body) => call("POST", "/v1/memories/search", { body }),
  memory: (userId, id) => call("GET", memoryPath(id), { query: { user_id: userId } }),
  history: (userId, id) => call("GET", memoryPath(id, "history"), { query: { user_id: userId } }),
  patch: (userId, id, body) => call("PATCH", memoryPath(id), { query: { user_id: userId }, body }),
  remove: (userId, id) => call("DELETE", memoryPath(id), { query: { user_id: userId } }),
  restore: (userId, id) => call("POST", memoryPath(id, "restore"), { query: { user_id: userId } }),
  feedback: (userId, id, body) => call("POST", memoryPath(id, "feedback"), { query: { user_id: userId }, body }),
  sessionMessages: (userId, sessionId, last = 1000) =>
    call("GET", `/v1/sessions/${encodeURIComponent(sessionId)}/messages`, { query: { user_id: userId, last } }),
  timeline: (userId, query) => call("GET", `/v1/users/${encodeURIComponent(userId)}/timeline`, { query }),
  erase: (userId) => call("DELETE", `/v1/users/${encodeURIComponent(userId)}`),
  jobs: (query) => call("GET", "/v1/jobs", { query }),
  job: (id) => call("GET", `/v1/jobs/${encodeURIComponent(id)}`),
  consolidate: (body) => call("POST", "/v1/jobs/consolidate", { body }),
};

function memoryPath(id, action) {
  return `/v1/memories/${encodeURIComponent(id)}${action ? `/${action}` : ""}`;
}
