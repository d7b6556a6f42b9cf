// DOM and API helpers. Every string from the server or a model goes in as text (textContent or a
// text node): never as HTML.

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style") Object.assign(node.style, value); // CSSOM: allowed by the CSP
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export function kv(key, value, id) {
  return el("div", { class: "kv" }, el("div", { class: "k" }, key),
    el("div", { class: "v", id }, value === undefined || value === null ? "—" : value));
}

export function card(title, ...children) {
  return el("section", { class: "card" }, el("h2", {}, title), ...children);
}

// A table of objects: one column per key (in first-seen order); nested values as JSON text.
export function objectTable(rows, id) {
  const keys = [];
  for (const row of rows) for (const key of Object.keys(row)) if (!keys.includes(key)) keys.push(key);
  return el("table", { id },
    el("thead", {}, el("tr", {}, keys.map((k) => el("th", {}, k)))),
    el("tbody", {}, rows.map((row) => el("tr", {}, keys.map((k) => el("td", {}, show(row[k])))))));
}

export function show(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export function fmtNum(value, digits = 1) {
  if (value === undefined || value === null || Number.isNaN(value)) return "—";
  return Number(value).toFixed(digits);
}

export function fmtUs(us) {
  if (us === undefined || us === null) return "—";
  return us >= 1000 ? (us / 1000).toFixed(2) + " ms" : us.toFixed(0) + " µs";
}

export function fmtBytes(n) {
  if (n === undefined || n === null) return "—";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return n.toFixed(i ? 1 : 0) + " " + units[i];
}

export function fmtDuration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + (s % 60) + "s";
}

// The admin token lives in this page's memory only (never stored, never in a URL).
let token = "";
export function setToken(value) { token = value; }
export function hasToken() { return token !== ""; }

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// Calls to the server's own APIs. State-changing calls (write) carry the admin token and a custom
// header: a page of another site can send neither without the server's consent (CORS), and the
// server refuses state-changing requests that a browser marks as cross-site.
export async function api(method, path, body, { write = false, text = false } = {}) {
  const headers = {};
  if (token) headers.Authorization = "Bearer " + token;
  if (write) headers["X-Inferd-Console"] = "1";
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const reply = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit", cache: "no-store", redirect: "error",
  });
  const raw = await reply.text();
  if (!reply.ok) {
    let message = raw;
    try { message = JSON.parse(raw).error || raw; } catch (e) { /* not JSON */ }
    throw new ApiError(reply.status, `${reply.status}: ${message}`);
  }
  if (text) return raw;
  return raw ? JSON.parse(raw) : null;
}

export function modelPath(name) { return "/v2/models/" + encodeURIComponent(name); }
