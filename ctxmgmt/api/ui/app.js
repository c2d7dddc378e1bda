// ctxmgmt's web page: definitions (list, editor with inline validation, simulate), agents,
// executions and one execution's token timeline. Plain JS, no dependency, no network but
// this server. Every request goes through api(), which adds the session's API key.
"use strict";

const API = "/_plugins/_ml";
const KEY = "ctxmgmt.apiKey";
const main = () => document.getElementById("main");

// -- small helpers -------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k === "style") node.style.cssText = v; // CSSOM: allowed by the page's CSP
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c);
  return node;
}
const svg = (tag, attrs = {}, ...children) => {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) node.setAttribute(k, v);
  for (const c of children.flat()) if (c) node.append(c);
  return node;
};
const fmt = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));
const when = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "-");
const textOf = (content) =>
  typeof content === "string" ? content
    : Array.isArray(content) ? content.map((p) => p.text || p.input_text || "").filter(Boolean).join("\n") : "";

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.reason) || `HTTP ${status}`);
    this.status = status;
    this.problems = (body && body.error && body.error.problems) || [];
  }
}

async function api(method, path, body) {
  const headers = { accept: "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => null);
  if (response.status === 401) showKeyForm("This server needs an API key.");
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

function showKeyForm(message) {
  const form = document.getElementById("key-form");
  form.hidden = false;
  const hint = form.querySelector(".hint");
  if (message) hint.textContent = `${message} It is kept in this tab's session storage and sent as a bearer token.`;
  document.getElementById("key-input").focus();
}

function failure(err) {
  return el("p", { class: "error", role: "alert", text: err instanceof ApiError ? `${err.status}: ${err.message}` : String(err) });
}

// -- routing -------------------------------------------------------------------------------
const routes = [
  [/^#\/definitions\/(.+)$/, (name) => definitionEditor(decodeURIComponent(name))],
  [/^#\/agents\/([0-9a-f]{32})$/, (id) => agentExecutions(id)],
  [/^#\/agents$/, () => agentsList()],
  [/^#\/executions\/([0-9a-f]{32})$/, (id) => executionView(id)],
  [/^#\/memory\/([0-9a-f]{32})$/, (id) => memoryView(id)],
  [/^#\/archive\/([^/]+)\/([tm]-[0-9a-f]{32})$/, (session, ref) => archiveView(decodeURIComponent(session), ref)],
  [/^.*$/, () => definitionsList()],
];

async function route() {
  const hash = location.hash || "#/definitions";
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", hash.startsWith(`#/${a.dataset.nav}`));
  for (const [pattern, view] of routes) {
    const m = hash.match(pattern);
    if (m) {
      main().replaceChildren(el("p", { class: "muted", text: "Loading…" }));
      try {
        main().replaceChildren(await view(...m.slice(1)));
        window.scrollTo(0, 0);
      } catch (err) {
        main().replaceChildren(failure(err));
      }
      return;
    }
  }
}

// -- definitions ---------------------------------------------------------------------------
async function definitionsList() {
  const data = await api("GET", `${API}/context_management?size=1000`);
  const rows = data.context_management.map((d) =>
    el("tr", {},
      el("td", {}, el("a", { href: `#/definitions/${encodeURIComponent(d.name)}`, text: d.name })),
      el("td", { text: d.description || "" }),
      el("td", { text: `v${d.version}` }),
      el("td", { text: when(d.last_modified) })));
  return el("div", {},
    el("div", { class: "row" }, el("h1", { text: `Definitions (${data.total})` }),
      el("a", { class: "button", href: "#/definitions/_new", text: "New definition" })),
    el("div", { class: "table-wrap" }, el("table", {},
      el("thead", {}, el("tr", {}, ["Name", "Description", "Version", "Modified"].map((h) => el("th", { text: h })))),
      el("tbody", {}, rows))));
}

const SAMPLE = `name: my-definition
description: Cut long tool outputs; keep a summary past 20 messages.
hooks:
  post_tool:
    - type: ToolsOutputTruncateManager
      config:
        max_output_length: 4000
  pre_llm:
    - type: SummarizationManager
      activation:
        message_count_exceed: 20
`;

const SAMPLE_CONVERSATION = JSON.stringify([
  { role: "user", content: "Why does the login fail?" },
  { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "read_log", arguments: "{\"name\": \"auth.log\"}" } }] },
  { role: "tool", tool_call_id: "call_1", content: "ERROR KeyError: 'session_id'\n".repeat(400) },
], null, 2);

function toYaml(stored) {
  const doc = { name: stored.name, description: stored.description || "" };
  if (stored.settings && Object.keys(stored.settings).length) doc.settings = stored.settings;
  doc.hooks = stored.hooks;
  return yaml(doc, 0);
}

// A YAML writer for JSON data: block mappings and sequences, scalars quoted as JSON
// strings whenever plain YAML could read them as something else.
function yamlScalar(v) {
  if (v === null) return "null";
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  const s = String(v);
  const plain = /^[A-Za-z_][A-Za-z0-9_ .,;()'/+-]*$/.test(s) && !/^(true|false|null|yes|no|on|off|~)$/i.test(s) && !/[:#]\s|\s$/.test(s);
  return plain ? s : JSON.stringify(s);
}
function yaml(v, indent) {
  const pad = " ".repeat(indent);
  if (Array.isArray(v)) {
    if (!v.length) return "[]";
    return v.map((item) => {
      if (item && typeof item === "object" && !Array.isArray(item) && Object.keys(item).length) {
        const body = yaml(item, indent + 2).replace(/^\s+/, "");
        return `${pad}- ${body}`;
      }
      return `${pad}- ${yamlBlock(item, indent + 2)}`;
    }).join("\n");
  }
  if (v && typeof v === "object") {
    const keys = Object.keys(v);
    if (!keys.length) return "{}";
    return keys.map((k) => `${pad}${yamlScalar(k)}:${yamlValue(v[k], indent + 2)}`).join("\n");
  }
  return yamlScalar(v);
}
function yamlBlock(v, indent) {
  return v && typeof v === "object" && Object.keys(v).length ? `\n${yaml(v, indent)}` : yaml(v, indent);
}
function yamlValue(v, indent) {
  return v && typeof v === "object" && Object.keys(v).length ? `\n${yaml(v, indent)}` : ` ${yaml(v, indent)}`;
}

async function definitionEditor(name) {
  let isNew = name === "_new";
  let version = null;
  let text = SAMPLE;
  if (!isNew) {
    const stored = await api("GET", `${API}/context_management/${encodeURIComponent(name)}`);
    version = stored.version;
    text = `${toYaml(stored)}\n`;
  }
  const editor = el("textarea", { id: "definition-text", spellcheck: "false", "aria-label": "Definition (YAML or JSON)" });
  editor.value = text;
  const problems = el("ul", { class: "problems", id: "problems" });
  const status = el("p", { class: "muted", id: "status" });
  const save = el("button", { type: "button", id: "save", text: isNew ? "Create" : "Save" });
  let parsed = null;
  let timer = null;

  async function check() {
    try {
      const result = await api("POST", `${API}/context_management/_validate`, { text: editor.value });
      parsed = result.valid ? result.definition : null;
      problems.replaceChildren(...result.problems.map((p) =>
        el("li", { role: "alert", class: p.severity, "data-pointer": p.pointer || "/" },
          `${p.line ? `line ${p.line}: ` : ""}${p.pointer || "/"}: ${p.message}`)));
      status.textContent = result.valid ? "Valid." : `${result.problems.filter((p) => p.severity === "error").length} problem(s).`;
      status.className = result.valid ? "ok" : "error";
      save.disabled = !result.valid;
    } catch (err) {
      problems.replaceChildren(el("li", { role: "alert" }, err.message));
      save.disabled = true;
    }
  }
  editor.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(check, 350); });

  save.addEventListener("click", async () => {
    await check();
    if (!parsed) return;
    const target = isNew ? parsed.name : name;
    try {
      const headers = isNew ? "POST" : "PUT";
      const path = `${API}/context_management/${encodeURIComponent(target)}${!isNew && version ? `?if_version=${version}` : ""}`;
      await api(headers, path, parsed);
      const stored = await api("GET", `${API}/context_management/${encodeURIComponent(target)}`);
      version = stored.version;
      status.textContent = `Saved ${target} (version ${version}).`;
      status.className = "ok";
      status.dataset.saved = "true";
      if (isNew) history.replaceState(null, "", `#/definitions/${encodeURIComponent(target)}`);
      isNew = false;
      name = target;
      save.textContent = "Save";
      heading.textContent = `${name} (version ${version})`;
    } catch (err) {
      status.textContent = `Not saved: ${err.message}`;
      status.className = "error";
      problems.replaceChildren(...err.problems.map((p) => el("li", { role: "alert" }, `${p.pointer}: ${p.message}`)));
    }
  });

  const simulation = simulatePane(() => parsed);
  const heading = el("h1", { text: isNew ? "New definition" : `${name} (version ${version})` });
  check();
  return el("div", {},
    heading,
    el("div", { class: "split" },
      el("section", {}, el("h2", { text: "Definition" }), editor, problems, el("div", { class: "row" }, save, status)),
      simulation));
}

function simulatePane(definition) {
  const input = el("textarea", { id: "simulate-input", spellcheck: "false", "aria-label": "Conversation (JSON)" });
  input.value = SAMPLE_CONVERSATION;
  const hook = el("select", { id: "simulate-hook", "aria-label": "Hook" },
    ["pre_llm", "post_tool", "post_memory"].map((h) => el("option", { value: h, text: h })));
  const window = el("input", { id: "simulate-window", type: "number", min: "1", placeholder: "window (tokens)", "aria-label": "Context window" });
  const output = el("div", { id: "simulate-output" });
  const run = el("button", { type: "button", id: "simulate", class: "secondary", text: "Simulate" });
  run.addEventListener("click", async () => {
    output.replaceChildren();
    const doc = definition();
    if (!doc) return output.append(el("p", { class: "error", role: "alert", text: "Fix the definition first." }));
    let context;
    try {
      context = JSON.parse(input.value);
    } catch (err) {
      return output.append(el("p", { class: "error", role: "alert", text: `The conversation is not JSON: ${err.message}` }));
    }
    if (Array.isArray(context)) context = { messages: context };
    if (window.value) context.context_window = Number(window.value);
    try {
      const result = await api("POST", `${API}/context_management/_simulate`, { definition: doc, hook: hook.value, context });
      output.append(...simulationResult(context.messages || [], result).filter(Boolean));
    } catch (err) {
      output.append(failure(err));
      for (const p of err.problems || []) output.append(el("p", { class: "error", role: "alert", text: `${p.pointer}: ${p.message}` }));
    }
  });
  return el("section", {}, el("h2", { text: "Simulate" }),
    el("p", { class: "hint", text: "A conversation in OpenAI chat, Anthropic or Responses format: a list of messages, or an object with messages, system_prompt and format." }),
    input, el("div", { class: "row" }, hook, window, run), output);
}

function simulationResult(before, result) {
  const after = result.context.messages;
  const key = (m) => JSON.stringify(m);
  const kept = new Set(after.map(key));
  const was = new Set(before.map(key));
  const fired = result.trace.filter((e) => e.activated && !e.error);
  const failed = result.trace.filter((e) => e.error);
  const summary = after.find((m) => textOf(m.content).startsWith("[ctxmgmt:summary]"));
  const line = (m, cls) => el("li", { class: cls },
    el("span", { class: "role", text: m.role || m.type || "?" }), textOf(m.content).slice(0, 400) || (m.tool_calls ? "(tool calls)" : ""));
  return [
    el("h2", { text: "Trace" }),
    el("div", { class: "table-wrap" }, el("table", { id: "simulate-trace" },
      el("thead", {}, el("tr", {}, ["Entry", "Activated", "Tokens", "Messages", "Details"].map((h) => el("th", { text: h })))),
      el("tbody", {}, result.trace.map((e) => el("tr", {},
        el("td", { text: `${e.hook}[${e.index}] ${e.type}` }),
        el("td", { text: e.activated ? "yes" : "no" }),
        el("td", { text: `${fmt(e.tokens_before)} → ${fmt(e.tokens_after)}` }),
        el("td", { text: `${e.messages_before} → ${e.messages_after}` }),
        el("td", { text: e.error ? `error: ${e.error}` : JSON.stringify(e.details) })))))),
    el("p", { class: "muted", text: fired.length ? `${fired.length} entr${fired.length > 1 ? "ies" : "y"} fired.` : "Nothing fired." }),
    failed.length ? el("p", { class: "error", role: "alert", text: `${failed.length} entr${failed.length > 1 ? "ies" : "y"} failed and changed nothing: ${failed.map((e) => `${e.type}: ${e.error}`).join("; ")}` }) : null,
    el("h2", { text: "Before" }),
    el("ul", { class: "messages", id: "before" }, before.map((m) => line(m, kept.has(key(m)) ? "" : "removed"))),
    el("h2", { text: "After" }),
    el("ul", { class: "messages", id: "after" }, after.map((m) => line(m, was.has(key(m)) ? "" : "added"))),
    summary ? el("div", {}, el("h2", { text: "Summary" }), el("pre", { id: "summary", text: textOf(summary.content) })) : null,
  ];
}

// -- agents and executions -----------------------------------------------------------------
async function agentsList() {
  const data = await api("GET", `${API}/agents?size=1000`);
  return el("div", {},
    el("h1", { text: `Agents (${data.total})` }),
    el("div", { class: "table-wrap" }, el("table", {},
      el("thead", {}, el("tr", {}, ["Name", "Model", "Definition", "Registered"].map((h) => el("th", { text: h })))),
      el("tbody", {}, data.agents.map((a) => el("tr", {},
        el("td", {}, el("a", { href: `#/agents/${a.agent_id}`, "data-agent": a.agent_id, text: a.name })),
        el("td", { text: (a.llm && a.llm.model_id) || "" }),
        el("td", { text: a.context_management_name || (a.context_management ? "inline" : "none") }),
        el("td", { text: when(a.created_time) })))))));
}

async function agentExecutions(agentId) {
  const [agent, data] = await Promise.all([
    api("GET", `${API}/agents/${agentId}`),
    api("GET", `${API}/agents/${agentId}/executions?size=1000`),
  ]);
  let rows = data.executions;
  const order = el("select", { id: "order", "aria-label": "Order" },
    el("option", { value: "newest", text: "newest first" }),
    el("option", { value: "closest", text: "closest to the window first" }));
  const body = el("tbody", {});
  const share = (e) => (e.context_window ? e.max_request_tokens / e.context_window : 0);
  const render = () => {
    const sorted = order.value === "closest" ? [...rows].sort((a, b) => share(b) - share(a)) : rows;
    body.replaceChildren(...sorted.map((e) => el("tr", { "data-execution": e.execution_id },
      el("td", {}, el("a", { href: `#/executions/${e.execution_id}`, text: when(e.started_time) })),
      el("td", { class: e.status === "error" ? "error" : e.status === "max_iteration" ? "status-max_iteration" : "", text: e.status }),
      el("td", { text: e.definition ? `${e.definition}${e.definition_version ? ` v${e.definition_version}` : ""}` : "none" }),
      el("td", { text: String(e.llm_calls) }),
      el("td", {}, `${fmt(e.max_request_tokens)} / ${fmt(e.context_window)}`,
        el("div", { class: `bar${share(e) > 0.9 ? " near" : ""}`, title: `${Math.round(share(e) * 100)}% of the window` },
          el("span", { style: `width: ${Math.min(100, share(e) * 100).toFixed(1)}%` }))))));
  };
  order.addEventListener("change", render);
  render();
  return el("div", {},
    el("h1", { text: `${agent.name}: executions (${data.total})` }),
    el("div", { class: "row" }, el("label", {}, "Order ", order)),
    el("div", { class: "table-wrap" }, el("table", { id: "executions" },
      el("thead", {}, el("tr", {}, ["Started", "Status", "Definition", "LLM calls", "Largest request / window"].map((h) => el("th", { text: h })))),
      body)));
}

async function executionView(id) {
  const record = await api("GET", `${API}/executions/${id}`);
  const details = el("div", { id: "details" }, el("p", { class: "muted", text: "Click a marker for what that manager did." }));
  const chart = timeline(record, (run, entry, marker) => {
    for (const m of document.querySelectorAll(".marker.selected")) m.classList.remove("selected");
    marker.classList.add("selected");
    details.replaceChildren(...entryDetails(record, run, entry).filter(Boolean));
  });
  return el("div", {},
    el("h1", { text: "Execution" }),
    el("p", { class: "muted" }, `id ${id} · `, el("a", { href: `#/memory/${record.memory_id}`, text: "the conversation's stored messages" })),
    record.question ? el("p", {}, el("strong", { text: "Question: " }), record.question) : null,
    el("p", {},
      `${record.status} · ${record.definition ? `${record.definition}${record.definition_version ? ` v${record.definition_version}` : ""} (${record.definition_source})` : "no definition"} · `,
      `${record.llm_calls} LLM calls · largest request ${fmt(record.max_request_tokens)}${record.context_window ? ` of ${fmt(record.context_window)}` : ""} · `,
      el("a", { href: `#/agents/${record.agent_id}`, text: "all executions of this agent" })),
    record.error ? el("p", { class: "error", text: record.error }) : null,
    cacheLine(record.cache),
    el("h2", { text: "Tokens per LLM call" }),
    el("div", { class: "legend" },
      el("span", {}, el("span", { class: "swatch", style: "background: var(--before)" }), "before the managers"),
      el("span", {}, el("span", { class: "swatch", style: "background: var(--after)" }), "the request"),
      el("span", {}, el("span", { class: "swatch diamond", style: "background: var(--threshold)" }), "a manager fired (click)"),
      el("span", {}, el("span", { class: "swatch", style: "background: var(--window)" }), "the window")),
    el("div", { class: "chart" }, chart),
    details,
    record.summary ? el("div", {}, el("h2", { text: "The summary the model saw" }), el("pre", { id: "summary", text: record.summary })) : null,
    record.archived && record.archived.length ? el("div", {}, el("h2", { text: "Archived" }),
      el("ul", { class: "archived" }, archivedBy(record).map(([ref, where]) => el("li", {},
        el("a", { href: `#/archive/${encodeURIComponent(record.memory_id)}/${ref}`, "data-ref": ref, text: ref }), ` ${where}`)))) : null,
    record.response ? el("div", {}, el("h2", { text: "Response" }), el("pre", { text: record.response })) : null);
}

function archivedBy(record) {
  const where = new Map();
  for (const run of record.hooks || []) {
    for (const e of run.entries) {
      for (const ref of [].concat(e.details.offloaded || [])) where.set(ref, `by ${e.type} (${run.hook}), call ${run.call}`);
    }
  }
  return record.archived.map((ref) => [ref, where.get(ref) || ""]);
}

function niceStep(max) {
  const raw = max / 4;
  const p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw);
}

/** The prompt cache over an execution: input tokens, the reusable share, the provider's
 * cached tokens and the estimated cost, when the record has them. */
function cacheLine(cache) {
  if (!cache || !cache.input_tokens) return null;
  const parts = [`${fmt(cache.input_tokens)} input tokens`, `${Math.round((cache.reusable_share || 0) * 100)}% reusable (the same prefix as the previous request)`];
  if (cache.cached_tokens != null) parts.push(`${fmt(cache.cached_tokens)} cached by the provider`);
  if (cache.estimated_cost != null) parts.push(`estimated cost ${cache.estimated_cost.toFixed(4)}`);
  return el("p", { id: "cache" }, el("strong", { text: "Prompt cache: " }), parts.join(" · "));
}

function timeline(record, onMarker) {
  const W = 800, H = 320, left = 64, right = 16, top = 16, bottom = 36;
  const calls = record.calls || [];
  const levels = [record.context_window || 0, ...calls.map((c) => Math.max(c.calibrated_before, c.calibrated)), ...(record.thresholds || []).map((t) => t.tokens)];
  const max = Math.max(1, ...levels) * 1.08;
  const x = (n) => left + (calls.length <= 1 ? (W - left - right) / 2 : ((n - 1) * (W - left - right)) / (calls.length - 1));
  const y = (t) => top + (H - top - bottom) * (1 - t / max);
  const g = svg("svg", { class: "timeline", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Tokens per LLM call" });
  const step = niceStep(max);
  for (let t = 0; t <= max; t += step) {
    g.append(svg("text", { x: 4, y: y(t) + 4 }, document.createTextNode(fmt(Math.round(t)))));
  }
  const label = (text, at) => svg("text", { class: "line-label", x: left + 4, y: y(at) - 4 }, document.createTextNode(text));
  if (record.context_window) {
    const name = `window ${fmt(record.context_window)}`;
    g.append(svg("line", { class: "window", "data-line": "window", x1: left, x2: W - right, y1: y(record.context_window), y2: y(record.context_window) },
      svg("title", {}, document.createTextNode(name))), label(name, record.context_window));
  }
  for (const t of record.thresholds || []) {
    const name = t.rule === "window - reserve"
      ? `fit: requests kept under ${fmt(t.tokens)}`
      : `${t.type}[${t.index}] fires over ${fmt(t.tokens)}`;
    g.append(svg("line", { class: "threshold", "data-line": "threshold", x1: left, x2: W - right, y1: y(t.tokens), y2: y(t.tokens) },
      svg("title", {}, document.createTextNode(name))), label(name, t.tokens));
  }
  g.append(svg("text", { x: left + (W - left - right) / 2 - 20, y: H - 2 }, document.createTextNode("LLM call")));
  g.append(svg("polyline", { points: calls.map((c) => `${x(c.call)},${y(c.calibrated)}`).join(" ") }));
  for (const c of calls) {
    g.append(svg("g", { class: "point", "data-call": String(c.call) },
      svg("line", { class: "span", x1: x(c.call), x2: x(c.call), y1: y(c.calibrated_before), y2: y(c.calibrated) }),
      svg("circle", { class: "before", cx: x(c.call), cy: y(c.calibrated_before), r: 3 }),
      svg("circle", { class: "after", cx: x(c.call), cy: y(c.calibrated), r: 4.5 }),
      svg("title", {}, document.createTextNode(`call ${c.call}: ${fmt(c.calibrated_before)} before the managers, ${fmt(c.calibrated)} sent${c.reported ? `, ${fmt(c.reported)} reported` : ""}${c.reusable_prefix_tokens != null ? `, ${fmt(c.reusable_prefix_tokens)} as the previous request` : ""}`))));
    if (calls.length <= 30 || c.call % Math.ceil(calls.length / 30) === 1) {
      g.append(svg("text", { x: x(c.call) - 4, y: H - 14 }, document.createTextNode(String(c.call))));
    }
  }
  const byCall = new Map(calls.map((c) => [c.call, c]));
  const stack = new Map();
  for (const run of record.hooks || []) {
    for (const entry of run.entries) {
      if (!entry.activated) continue;
      const at = run.call || 1;
      const c = byCall.get(at) || byCall.get(at + 1);
      if (!c) continue;
      // post_tool runs after call N's tools, before call N+1: between the two.
      const after = run.hook === "post_tool" && byCall.has(c.call + 1);
      const slot = after ? c.call + 0.5 : c.call;
      const level = stack.get(slot) || 0;
      stack.set(slot, level + 1);
      const next = after ? byCall.get(c.call + 1) : c;
      const cx = x(slot), cy = y(Math.max(next.calibrated_before, c.calibrated)) - 10 - level * 12;
      const marker = svg("path", {
        class: "marker", "data-manager": entry.type, "data-hook": run.hook, "data-at": String(c.call), tabindex: "0",
        d: `M ${cx} ${cy - 6} L ${cx + 6} ${cy} L ${cx} ${cy + 6} L ${cx - 6} ${cy} Z`,
      }, svg("title", {}, document.createTextNode(`${run.hook}[${entry.index}] ${entry.type} at call ${c.call}`)));
      marker.addEventListener("click", () => onMarker(run, entry, marker));
      marker.addEventListener("keydown", (ev) => { if (ev.key === "Enter") onMarker(run, entry, marker); });
      g.append(marker);
    }
  }
  return g;
}

function entryDetails(record, run, entry) {
  const refs = [].concat(entry.details.offloaded || []).filter((r) => typeof r === "string");
  const preview = (items, cls) => el("ul", { class: "messages" }, (items || []).map((m) =>
    el("li", { class: cls }, el("span", { class: "role", text: m.role }),
      m.calls ? `(calls ${m.calls.join(", ")}) ` : "",
      `${m.text}${m.chars > m.text.length ? ` … (${fmt(m.chars)} characters)` : ""}`)));
  return [
    el("h2", { text: `${entry.hook}[${entry.index}] ${entry.type}, call ${run.call}` }),
    el("p", {}, `${fmt(entry.tokens_before)} → ${fmt(entry.tokens_after)} tokens, ${entry.messages_before} → ${entry.messages_after} messages`,
      entry.error ? el("span", { class: "error", text: ` · error: ${entry.error}` }) : null),
    run.removed ? el("div", {}, el("h2", { text: `Removed by this hook run (${run.removed})` }), preview(run.removed_preview, "removed")) : null,
    run.added ? el("div", {}, el("h2", { text: `Added: summaries, cut results (${run.added})` }), preview(run.added_preview, "added")) : null,
    refs.length ? el("p", {}, "Archived: ", refs.map((ref) => el("a", { href: `#/archive/${encodeURIComponent(record.memory_id)}/${ref}`, "data-ref": ref, text: `${ref} ` }))) : null,
    el("pre", { id: "entry", text: JSON.stringify(entry, null, 2) }),
  ];
}

async function memoryView(id) {
  const data = await api("GET", `${API}/memory/${id}/messages?size=1000`);
  return el("div", {},
    el("h1", { text: "Stored messages" }),
    el("p", { class: "muted", text: `memory ${id}: ${fmt(data.total)} messages, whole, as stored${data.total > data.messages.length ? ` (the first ${data.messages.length} shown)` : ""}` }),
    el("ul", { class: "messages", id: "memory" }, data.messages.map((m) =>
      el("li", {}, el("span", { class: "role", text: m.role }),
        m.tool_calls ? `(calls ${m.tool_calls.map((c) => c.function && c.function.name).join(", ")}) ` : "",
        textOf(m.content)))));
}

async function archiveView(session, ref) {
  const data = await api("GET", `${API}/offload/${ref}?session=${encodeURIComponent(session)}&limit=200000`);
  return el("div", {},
    el("h1", { text: `Archived ${ref}` }),
    el("p", { class: "muted", text: `${fmt(data.total)} characters${data.next_offset ? ", the first part shown" : ""}` }),
    el("pre", { id: "archived", text: data.text }));
}

// -- start -----------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("key-form");
  document.getElementById("key-button").addEventListener("click", () => { form.hidden = !form.hidden; });
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, document.getElementById("key-input").value);
    form.hidden = true;
    route();
  });
  document.getElementById("key-forget").addEventListener("click", () => { sessionStorage.removeItem(KEY); form.hidden = true; route(); });
  window.addEventListener("hashchange", route);
  route();
});
