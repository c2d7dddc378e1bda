// ctxmgmt's web page: definitions (list, editor with inline validation, simulate), agents,
// executions, one execution's token timeline, and saved eval reports. Plain JS, no dependency, no network but
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
/** The text of a message content for a summary line: never throws, odd parts give nothing
 * (the stored-messages view says what is odd: see contentText). */
const textOf = (content) =>
  typeof content === "string" ? content
    : Array.isArray(content) ? content.map((p) => (p && typeof p === "object" && typeof p.text === "string" ? p.text : typeof p === "string" ? p : ""))
      .filter(Boolean).join("\n") : "";

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.reason) || `HTTP ${status}`);
    this.status = status;
    this.problems = (body && body.error && body.error.problems) || [];
  }
}

/** A JSON text with every number kept as its source text (JSON.rawJSON), so that what the
 * editor shows and sends back is the number the server holds: 1.0 stays a float, 1e-7 and
 * integers past 2^53 stay exact. Plain numbers where the browser cannot. */
function jsonExact(text) {
  const keep = (key, value, context) =>
    typeof value === "number" && context && typeof context.source === "string" && JSON.rawJSON
      ? JSON.rawJSON(context.source) : value;
  return JSON.parse(text, keep);
}

/** A call of this server's API. With exact, the answer comes twice: as plain data and as
 * jsonExact's (for the definition editor's numbers). */
async function api(method, path, body, exact = false) {
  const headers = { accept: "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text().catch(() => "");
  let data = null;
  try { data = JSON.parse(text); } catch { data = null; }
  if (response.status === 401) showKeyForm("This server needs an API key.");
  if (!response.ok) throw new ApiError(response.status, data);
  return exact ? [data, jsonExact(text)] : data;
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
  [/^#\/memory\/([0-9a-f]{32})(?:\?from=(\d{1,9}))?$/, (id, from) => memoryView(id, Number(from || 0))],
  [/^#\/eval\/([0-9a-f]{32})$/, (id) => evalView(id)],
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

// A YAML writer for JSON data that PyYAML (the server's YAML 1.1 reader) reads back exactly:
// block mappings and sequences; a string plain only when it is a simple word sentence that no
// YAML reads as anything else, otherwise double-quoted with every character that YAML would
// fold, refuse or read as a line break (U+0085, U+2028, U+2029, controls) escaped; a number in
// the form PyYAML reads as the same int or float (a float's mantissa has a dot, its exponent a
// sign). Numbers read with jsonExact() keep their source text (1.0 stays a float, 1e-7 exact).
const YAML_WORDS = /^(y|n|yes|no|true|false|on|off|null|~)$/i;
function yamlString(s) {
  const plain = /^[A-Za-z_][A-Za-z0-9_.\/-]*( [A-Za-z0-9_.,;()'\/+-]+)*$/.test(s) && !YAML_WORDS.test(s);
  if (plain) return s;
  return JSON.stringify(s).replace(/[\u007f-\u009f\u00a0\u2028\u2029\ufeff\ufffe\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
function yamlNumber(text) {
  // JSON's number grammar in, YAML 1.1's int or float out, the same value.
  const m = /^(-?\d+)(\.\d+)?(?:[eE]([+-]?)(\d+))?$/.exec(text);
  if (!m) throw new Error(`not a JSON number: ${text}`);
  const [, whole, frac, sign, exp] = m;
  if (frac === undefined && exp === undefined) return whole;
  return `${whole}${frac || ".0"}${exp === undefined ? "" : `e${sign || "+"}${exp}`}`;
}
function yamlScalar(v) {
  if (v === null) return "null";
  if (typeof v === "boolean") return String(v);
  if (JSON.isRawJSON && JSON.isRawJSON(v)) return yamlNumber(v.rawJSON);
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw new Error(`${v} is not a JSON number`);
    if (Object.is(v, -0)) return "-0.0";
    return yamlNumber(String(v));
  }
  return yamlString(String(v));
}
const isMap = (v) => v !== null && typeof v === "object" && !Array.isArray(v) && !(JSON.isRawJSON && JSON.isRawJSON(v));
const nested = (v) => (Array.isArray(v) && v.length > 0) || (isMap(v) && Object.keys(v).length > 0);
function yaml(v, indent) {
  const pad = " ".repeat(indent);
  if (Array.isArray(v)) {
    if (!v.length) return "[]";
    return v.map((item) => {
      if (isMap(item) && nested(item)) return `${pad}- ${yaml(item, indent + 2).replace(/^\s+/, "")}`;
      return `${pad}-${nested(item) ? `\n${yaml(item, indent + 2)}` : ` ${yaml(item, indent + 2)}`}`;
    }).join("\n");
  }
  if (isMap(v)) {
    const keys = Object.keys(v);
    if (!keys.length) return "{}";
    return keys.map((k) => `${pad}${yamlString(k)}:${nested(v[k]) ? `\n${yaml(v[k], indent + 2)}` : ` ${yaml(v[k], indent + 2)}`}`).join("\n");
  }
  return yamlScalar(v);
}

async function definitionEditor(name) {
  let isNew = name === "_new";
  let version = null;
  let text = SAMPLE;
  if (!isNew) {
    const [stored, exact] = await api("GET", `${API}/context_management/${encodeURIComponent(name)}`, undefined, true);
    version = stored.version;
    text = `${toYaml(exact)}\n`;
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
      const [result, exact] = await api("POST", `${API}/context_management/_validate`, { text: editor.value }, true);
      parsed = result.valid ? exact.definition : null;
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
  // The summary this run wrote: new in the output (a marker already in the input is the user's text).
  const summary = after.find((m) => !was.has(key(m)) && textOf(m.content).startsWith("[ctxmgmt:summary]"));
  const line = (m, cls) => {
    try {
      return el("li", { class: cls },
        el("span", { class: "role", text: String(m.role || m.type || "?") }), textOf(m.content).slice(0, 400) || (m.tool_calls ? "(tool calls)" : ""));
    } catch (err) {
      return el("li", { class: "unshowable" }, `this message cannot be shown: ${describe(m)}`);
    }
  };
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
  const onMarker = (run, entry, marker) => {
    for (const m of document.querySelectorAll(".marker.selected")) m.classList.remove("selected");
    marker.classList.add("selected");
    details.replaceChildren(...entryDetails(record, run, entry).filter(Boolean));
  };
  // Drawn at the width it is shown at (one SVG unit is one pixel: text stays 12 px on a
  // phone), and again when that width changes.
  const chart = el("div", { class: "chart" });
  let drawn = 0;
  new ResizeObserver(() => {
    const width = Math.round(chart.clientWidth);
    if (!width || width === drawn) return;
    drawn = width;
    chart.replaceChildren(...timeline(record, onMarker, width));
  }).observe(chart);
  return el("div", {},
    el("h1", { text: "Execution" }),
    el("p", { class: "muted" }, `id ${id} · `, el("a", { href: `#/memory/${record.memory_id}`, text: "the conversation's stored messages" })),
    record.question ? el("p", { id: "question" }, el("strong", { text: "Question: " }),
      longText(typeof record.question === "string" ? record.question : textOf(record.question))) : null,
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
    chart,
    details,
    record.summary ? el("div", {}, el("h2", { text: "The summary the model saw" }), el("pre", { id: "summary" }, longText(String(record.summary)))) : null,
    record.archived && record.archived.length ? el("div", {}, el("h2", { text: "Archived" }),
      el("ul", { class: "archived" }, archivedBy(record).map(([ref, where]) => el("li", {},
        el("a", { href: `#/archive/${encodeURIComponent(record.memory_id)}/${ref}`, "data-ref": ref, text: ref }), ` ${where}`)))) : null,
    record.response ? el("div", {}, el("h2", { text: "Response" }), el("pre", { id: "response" }, longText(String(record.response)))) : null);
}

function archivedBy(record) {
  const where = new Map();
  for (const run of record.hooks || []) {
    for (const e of run.entries) {
      for (const ref of [].concat((e.details || {}).offloaded || [])) where.set(ref, `by ${e.type} (${run.hook}), call ${run.call}`);
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

/** Label positions: each as near its wanted y as it can be, none closer than `gap` to the
 * next, all within [low, high]; the ones that do not fit are left out (null). */
function spread(wanted, gap, low, high) {
  const order = wanted.map((y, i) => [y, i]).sort((a, b) => a[0] - b[0]);
  const fits = Math.max(0, Math.floor((high - low) / gap) + 1);
  const kept = order.slice(0, fits);
  const ys = kept.map(([y]) => Math.min(high, Math.max(low, y)));
  for (let i = 1; i < ys.length; i++) ys[i] = Math.max(ys[i], ys[i - 1] + gap);
  for (let i = ys.length - 1; i >= 0; i--) ys[i] = Math.min(ys[i], i === ys.length - 1 ? high : ys[i + 1] - gap);
  const out = wanted.map(() => null);
  kept.forEach(([, i], k) => { out[i] = ys[k]; });
  return out;
}

/** The tokens of each LLM call, before the managers and as sent, on a scale that fits what
 * was sent and the window; the window's and the thresholds' lines, labelled without overlap
 * (a threshold off that scale is named under the chart); a marker where a manager fired. */
function timeline(record, onMarker, width = 800) {
  const W = Math.max(300, width), H = W < 600 ? 260 : 320, left = 64, right = 12, top = 26, bottom = 40;
  const FONT = 12, GAP = FONT + 3;
  const calls = record.calls || [];
  const sent = calls.map((c) => Math.max(Number(c.calibrated_before) || 0, Number(c.calibrated) || 0));
  const max = Math.max(1, record.context_window || 0, ...sent) * 1.08;
  const x = (n) => left + (calls.length <= 1 ? (W - left - right) / 2 : ((n - 1) * (W - left - right)) / (calls.length - 1));
  const y = (t) => top + (H - top - bottom) * (1 - t / max);
  const g = svg("svg", { class: "timeline", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "Tokens per LLM call" });
  const step = niceStep(max);
  for (let t = 0; t <= max; t += step) {
    g.append(svg("text", { class: "tick", x: 4, y: y(t) + 4 }, document.createTextNode(fmt(Math.round(t)))));
  }
  const lines = [];
  if (record.context_window) lines.push({ cls: "window", tokens: record.context_window, name: `window ${fmt(record.context_window)}` });
  for (const t of record.thresholds || []) {
    const name = t.rule === "window - reserve"
      ? `fit: requests kept under ${fmt(t.tokens)}`
      : `${t.type}[${t.index}] fires over ${fmt(t.tokens)}`;
    lines.push({ cls: "threshold", tokens: t.tokens, name });
  }
  const shown = lines.filter((l) => l.tokens <= max);
  const places = spread(shown.map((l) => y(l.tokens) - 4), GAP, top - 4 + FONT / 2, H - bottom - 4);
  const off = lines.filter((l) => l.tokens > max).map((l) => l.name);
  shown.forEach((l, i) => {
    g.append(svg("line", { class: l.cls, "data-line": l.cls, x1: left, x2: W - right, y1: y(l.tokens), y2: y(l.tokens) },
      svg("title", {}, document.createTextNode(l.name))));
    if (places[i] === null) off.push(`${l.name} (its label has no room)`);
    else g.append(svg("text", { class: "line-label", "data-line": l.cls, x: left + 4, y: places[i] }, document.createTextNode(l.name)));
  });
  g.append(svg("text", { class: "axis", x: left + (W - left - right) / 2 - 24, y: H - 6 }, document.createTextNode("LLM call")));
  g.append(svg("polyline", { points: calls.map((c) => `${x(c.call)},${y(c.calibrated)}`).join(" ") }));
  const every = Math.max(1, Math.ceil(calls.length / Math.max(1, Math.floor((W - left - right) / 36))));
  for (const c of calls) {
    g.append(svg("g", { class: "point", "data-call": String(c.call) },
      svg("line", { class: "span", x1: x(c.call), x2: x(c.call), y1: y(c.calibrated_before), y2: y(c.calibrated) }),
      svg("circle", { class: "before", cx: x(c.call), cy: y(c.calibrated_before), r: 3 }),
      svg("circle", { class: "after", cx: x(c.call), cy: y(c.calibrated), r: 4.5 }),
      svg("title", {}, document.createTextNode(`call ${c.call}: ${fmt(c.calibrated_before)} before the managers, ${fmt(c.calibrated)} sent${c.reported ? `, ${fmt(c.reported)} reported` : ""}${c.reusable_prefix_tokens != null ? `, ${fmt(c.reusable_prefix_tokens)} as the previous request` : ""}`))));
    if ((c.call - 1) % every === 0) {
      g.append(svg("text", { class: "call", x: x(c.call), y: H - bottom + 16, "text-anchor": "middle" }, document.createTextNode(String(c.call))));
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
      const cx = x(slot), cy = Math.max(7, y(Math.max(next.calibrated_before, c.calibrated)) - 10 - level * 12);
      const marker = svg("path", {
        class: "marker", "data-manager": entry.type, "data-hook": run.hook, "data-at": String(c.call), tabindex: "0",
        d: `M ${cx} ${cy - 6} L ${cx + 6} ${cy} L ${cx} ${cy + 6} L ${cx - 6} ${cy} Z`,
      }, svg("title", {}, document.createTextNode(`${run.hook}[${entry.index}] ${entry.type} at call ${c.call}`)));
      marker.addEventListener("click", () => onMarker(run, entry, marker));
      marker.addEventListener("keydown", (ev) => { if (ev.key === "Enter") onMarker(run, entry, marker); });
      g.append(marker);
    }
  }
  const note = off.length ? el("p", { class: "muted", id: "off-scale", text: `Off this chart's scale (it fits the requests and the window): ${off.join("; ")}.` }) : null;
  return [g, note].filter(Boolean);
}

/** Whether a trace entry changed the conversation by its numbers (as `ctxmgmt trace` reads
 * them): it ran, did not fail, was not postponed, and its tokens or messages moved. */
const changedBy = (e) => e.activated && !e.error && !(e.details && e.details.postponed)
  && (e.tokens_before !== e.tokens_after || e.messages_before !== e.messages_after);

/** What this entry removed and added, credited to it alone: the record's per-entry changes
 * when it has them; else the hook run's, when this entry is the only one that changed
 * anything; else the run's, named as the run's with the entries that changed it. */
function credit(run, entry, preview) {
  const show = (what, heading) => [
    what.removed ? el("div", { class: "credit" }, el("h2", { text: `Removed by ${heading} (${what.removed})` }), preview(what.removed_preview, "removed")) : null,
    what.added ? el("div", { class: "credit" }, el("h2", { text: `Added by ${heading}: summaries, cut results (${what.added})` }), preview(what.added_preview, "added")) : null,
  ];
  const nothing = [el("p", { class: "muted", id: "unchanged", text: "This entry changed nothing in the conversation." })];
  if (Array.isArray(run.changes)) {
    const own = run.changes.find((c) => c.index === entry.index);
    return own && (own.removed || own.added) ? show(own, "this entry") : nothing;
  }
  const changers = run.entries.filter(changedBy);
  if (!changers.includes(entry)) return nothing;
  if (changers.length === 1) return show(run, "this entry");
  return show(run, `this hook run (${changers.map((e) => `${e.type}[${e.index}]`).join(", ")})`);
}

function entryDetails(record, run, entry) {
  const refs = [].concat((entry.details || {}).offloaded || []).filter((r) => typeof r === "string");
  const preview = (items, cls) => el("ul", { class: "messages" }, (items || []).map((m) =>
    el("li", { class: cls }, el("span", { class: "role", text: m.role }),
      m.calls ? `(calls ${m.calls.join(", ")}) ` : "",
      `${m.text}${m.chars > m.text.length ? ` … (${fmt(m.chars)} characters)` : ""}`)));
  return [
    el("h2", { text: `${entry.hook}[${entry.index}] ${entry.type}, call ${run.call}` }),
    el("p", {}, `${fmt(entry.tokens_before)} → ${fmt(entry.tokens_after)} tokens, ${entry.messages_before} → ${entry.messages_after} messages`,
      entry.error ? el("span", { class: "error", text: ` · error: ${entry.error}` }) : null),
    ...credit(run, entry, preview),
    refs.length ? el("p", {}, "Archived: ", refs.map((ref) => el("a", { href: `#/archive/${encodeURIComponent(record.memory_id)}/${ref}`, "data-ref": ref, text: `${ref} ` }))) : null,
    el("pre", { id: "entry", text: JSON.stringify(entry, null, 2) }),
  ];
}

/** Messages per page of the stored-messages view; characters a long message shows at first,
 * and that each "show more" adds. */
const PAGE = 50, FIRST_CHARS = 4000, MORE_CHARS = 50000;

const describe = (v) => (v === null ? "null" : Array.isArray(v) ? "a list" : typeof v === "object" ? "an object" : `a ${typeof v} (${String(v).slice(0, 40)})`);

/** The text of a stored message's content; throws an Error saying why it cannot be shown. */
function contentText(m) {
  const c = m.content;
  if (typeof c === "string") return c;
  if (c === null || c === undefined) {
    if (m.role === "assistant") return "";  // tool calls only, or a refusal
    throw new Error(`its content is ${c === null ? "null" : "missing"}`);
  }
  if (!Array.isArray(c)) throw new Error(`its content is ${describe(c)}, not text or a list of parts`);
  return c.map((p, i) => {
    if (typeof p === "string") return p;
    if (p === null || typeof p !== "object" || Array.isArray(p)) throw new Error(`content part ${i} is ${describe(p)}, not a part`);
    if (typeof p.text === "string") return p.text;
    return `[${typeof p.type === "string" ? p.type.slice(0, 40) : "part"}]`;
  }).join("\n");
}

/** A long text, FIRST_CHARS at first and MORE_CHARS more per click, in a box of its own
 * height that scrolls: never all of a 20 MB tool result in the page at once. */
function longText(text) {
  const body = el("span", { class: text.length > FIRST_CHARS ? "text long" : "text" });
  const more = el("button", { type: "button", class: "link more" });
  let shown = 0;
  const show = (n) => {
    const next = Math.min(text.length, shown + n);
    body.append(text.slice(shown, next));
    shown = next;
    if (shown < text.length) more.textContent = `show more (${fmt(shown)} of ${fmt(text.length)} characters shown)`;
    else more.remove();
  };
  more.addEventListener("click", () => show(MORE_CHARS));
  show(FIRST_CHARS);
  return [body, shown < text.length ? more : null];
}

/** One stored message, or a placeholder saying why it cannot be shown: one odd message
 * never fails the view. */
function storedMessage(m, index) {
  const number = el("span", { class: "index", text: `#${index}` });
  try {
    if (m === null || typeof m !== "object" || Array.isArray(m)) throw new Error(`it is ${describe(m)}, not a message object`);
    if (m.tool_calls !== undefined && m.tool_calls !== null && !Array.isArray(m.tool_calls)) throw new Error(`its tool_calls is ${describe(m.tool_calls)}, not a list`);
    const calls = (m.tool_calls || []).slice(0, 20).map((c) => (c && c.function && typeof c.function.name === "string" ? c.function.name.slice(0, 80) : "?"));
    if (m.tool_calls && m.tool_calls.length > 20) calls.push(`${fmt(m.tool_calls.length - 20)} more`);
    const text = contentText(m);
    return el("li", { "data-index": String(index) }, number,
      el("span", { class: "role", text: typeof m.role === "string" ? m.role.slice(0, 40) : "?" }),
      calls.length ? `(calls ${calls.join(", ")}) ` : "",
      longText(text));
  } catch (err) {
    return el("li", { class: "unshowable", "data-index": String(index) }, number,
      `this message cannot be shown: ${err instanceof Error ? err.message : String(err)}`);
  }
}

async function memoryView(id, from = 0) {
  const data = await api("GET", `${API}/memory/${id}/messages?from=${from}&size=${PAGE}`);
  const messages = Array.isArray(data.messages) ? data.messages : [];
  const total = Number(data.total) || 0;
  const at = (n) => `#/memory/${id}?from=${Math.max(0, n)}`;
  const last = Math.max(0, Math.floor((total - 1) / PAGE) * PAGE);
  const pager = () => el("nav", { class: "row pager", "aria-label": "Pages of messages" },
    from > 0 ? el("a", { href: at(0), text: "first" }) : null,
    from > 0 ? el("a", { href: at(from - PAGE), rel: "prev", text: `previous ${PAGE}` }) : null,
    from + PAGE < total ? el("a", { href: at(from + PAGE), rel: "next", text: `next ${PAGE}` }) : null,
    from + PAGE < total ? el("a", { href: at(last), text: "last" }) : null);
  const range = messages.length ? `messages ${fmt(from)}–${fmt(from + messages.length - 1)} shown` : "no messages here";
  return el("div", {},
    el("h1", { text: "Stored messages" }),
    el("p", { class: "muted", text: `memory ${id}: ${fmt(total)} messages, as stored; ${range}` }),
    pager(),
    el("ul", { class: "messages", id: "memory" }, messages.map((m, i) => storedMessage(m, from + i))),
    messages.length > 10 ? pager() : null);
}

async function archiveView(session, ref) {
  const data = await api("GET", `${API}/offload/${ref}?session=${encodeURIComponent(session)}&limit=200000`);
  return el("div", {},
    el("h1", { text: `Archived ${ref}` }),
    el("p", { class: "muted", text: `${fmt(data.total)} characters${data.next_offset ? ", the first part shown" : ""}` }),
    el("pre", { id: "archived", text: data.text }));
}

// -- eval reports (ctxmgmt eval --save) ----------------------------------------------------------
const EVAL_CATEGORIES = [["paths", "paths"], ["commands", "commands"], ["error_lines", "error lines"], ["numbers", "numbers & ids"]];
const pct = (v) => (typeof v === "number" && Number.isFinite(v) ? `${Math.round(v * 100)}%` : "-");
const list = (v) => (Array.isArray(v) ? v : []);
const obj = (v) => (v && typeof v === "object" && !Array.isArray(v) ? v : {});

/** The mean tokens sent at each call number of a row, over its conversations. */
function evalSeries(row) {
  const sums = [], counts = [];
  for (const c of list(row.per_call)) {
    const k = Number(c && c.call) - 1;
    if (!Number.isInteger(k) || k < 0 || k > 100000 || (c && c.refused) || typeof c.tokens !== "number") continue;
    sums[k] = (sums[k] || 0) + c.tokens;
    counts[k] = (counts[k] || 0) + 1;
  }
  return Array.from({ length: sums.length }, (_, k) => (counts[k] ? sums[k] / counts[k] : null));
}

function evalChart(rows, width = 800, height = 180) {
  const series = rows.map((r) => evalSeries(r));
  const n = Math.max(1, ...series.map((s) => s.length));
  const peak = Math.max(1, ...series.flat().filter((v) => v !== null));
  const left = 60, right = 10, top = 10, bottom = 20, span = width - left - right, tall = height - top - bottom;
  const colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
  const defs = [...new Set(rows.map((r) => r.of || r.name))];
  const lines = rows.map((r, i) => {
    const points = series[i].map((v, k) => (v === null ? null : `${(left + span * k / Math.max(1, n - 1)).toFixed(1)},${(top + tall * (1 - v / peak)).toFixed(1)}`)).filter(Boolean).join(" ");
    const colour = r.kind === "observation_masking" ? "#888888" : colours[defs.indexOf(r.of || r.name) % colours.length];
    return svg("polyline", { points, fill: "none", stroke: colour, "stroke-width": "1.4", "stroke-dasharray": r.kind === "sliding_window" ? "5,3" : null, class: "eval-line" },
      svg("title", {}, `${r.name}${r.of ? ` (= ${r.of})` : ""}`));
  });
  return svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "eval-chart" },
    svg("line", { x1: left, x2: left + span, y1: top + tall, y2: top + tall, stroke: "#999" }),
    Object.assign(svg("text", { x: left - 6, y: top + 8, "text-anchor": "end", "font-size": "12" }), { textContent: fmt(Math.round(peak)) }),
    Object.assign(svg("text", { x: left - 6, y: top + tall, "text-anchor": "end", "font-size": "12" }), { textContent: "0" }),
    Object.assign(svg("text", { x: left + span, y: height - 4, "text-anchor": "end", "font-size": "12" }), { textContent: `call ${n}` }),
    lines);
}

async function evalView(id) {
  const report = await api("GET", `${API}/context_management/_eval/${id}`);
  const rows = list(report.rows).map(obj);
  const windows = [...new Set(rows.map((r) => r.window))];
  const head = ["Row", "Window", "Calls", "Tokens", "Tokens/call", "Cost", "Reusable", "Over window", "Invalid", "Refused",
    "Trace errors", ...EVAL_CATEGORIES.map(([, label]) => `${label} kept`)];
  const line = (r) => {
    const kept = obj(r.kept_share), got = obj(r.kept), needed = obj(r.needed);
    return el("tr", { class: `eval-${r.kind}` },
      el("td", { text: r.of ? `${r.name} (= ${r.of})` : String(r.name) }),
      el("td", { text: fmt(r.window) }), el("td", { text: fmt(r.calls) }), el("td", { text: fmt(r.tokens_sent) }),
      el("td", { text: fmt(obj(r.tokens_per_call).mean === null ? null : Math.round(obj(r.tokens_per_call).mean)) }),
      el("td", { text: typeof r.estimated_cost === "number" ? r.estimated_cost.toFixed(4) : "-" }),
      el("td", { text: pct(r.reusable_prefix_share) }), el("td", { text: fmt(r.over_window) }),
      el("td", { text: fmt(r.invalid_requests) }), el("td", { text: fmt(r.refused) }), el("td", { text: fmt(r.trace_errors) }),
      EVAL_CATEGORIES.map(([c]) => el("td", { text: needed[c] ? `${pct(kept[c])} (${fmt(got[c])}/${fmt(needed[c])})` : "-" })));
  };
  return el("div", {},
    el("h1", { text: "Eval report" }),
    el("p", { class: "muted", text: `id ${id} · saved ${when(report.created_time)} · ${list(report.conversations).length} conversations · ${String(report.schema || "")}` }),
    el("p", { class: "hint", text: "Needed specifics: paths, commands, error lines, numbers and ids of content the request no longer holds as it was, which the agent uses again at that call or later; kept: still verbatim in the request." }),
    el("div", { class: "table-wrap" }, el("table", { id: "eval-table" },
      el("thead", {}, el("tr", {}, head.map((h) => el("th", { text: h })))),
      el("tbody", {}, rows.map(line)))),
    windows.map((w) => el("div", {},
      el("h2", { text: `Mean tokens sent per call, window ${fmt(w)}` }),
      el("p", { class: "muted", text: "Solid: a definition; dashed: its same-size sliding window; grey: observation masking." }),
      el("div", { class: "chart" }, evalChart(rows.filter((r) => r.window === w))))));
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
