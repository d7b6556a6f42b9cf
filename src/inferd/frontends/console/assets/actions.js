// Actions on a model: shown only once an admin token is entered; every call carries it, and the
// server checks it (and refuses cross-site requests) whatever the page shows.
import { api, el, modelPath } from "./dom.js";

let last = null; // the last action's outcome, kept across the page's re-render

function repo(model, verb) {
  return "/v2/repository/models/" + encodeURIComponent(model) + "/" + verb;
}

export function actions(model, version, refresh) {
  const result = el("p", { id: "action-result", class: last?.ok ? "okmsg" : "error" }, last?.text ?? "");
  last = null;
  const run = (label, method, path, body) => async () => {
    result.className = "muted";
    result.textContent = `${label}…`;
    try {
      await api(method, path, body, { write: true });
      last = { ok: true, text: `${label}: done` };
    } catch (error) {
      last = { ok: false, text: `${label} refused: ${error.message}` };
    }
    refresh();
  };
  const policy = el("textarea", { id: "rollout-policy", rows: 4, placeholder: '{"kind": "split", "variants": [...]}' });
  const setPolicy = async () => {
    let body;
    try { body = JSON.parse(policy.value); } catch (error) {
      result.className = "error"; result.textContent = `the policy is not JSON: ${error.message}`; return;
    }
    await run("set rollout policy", "PUT", modelPath(model) + "/rollout", body)();
  };
  return el("section", { class: "card", id: "actions" }, el("h2", {}, "Actions"),
    el("div", { class: "toolbar" },
      el("button", { id: "act-load", onclick: run("load", "POST", repo(model, "load"), {}) }, "load"),
      el("button", { id: "act-reload", onclick: run("reload", "POST", repo(model, "load"), {}) }, "reload"),
      el("button", { id: "act-unload", class: "danger", onclick: run("unload", "POST", repo(model, "unload"), {}) }, "unload"),
      el("button", { id: "act-rollback", onclick: run("roll back", "POST", repo(model, "rollback"), {}) }, "roll back version"),
      el("button", { id: "act-unpin", onclick: run("unpin", "POST", repo(model, "unpin"), {}) }, "unpin")),
    el("div", { class: "field" }, el("label", { for: "rollout-policy" }, "rollout policy (JSON)"), policy),
    el("div", { class: "toolbar" },
      el("button", { id: "act-rollout-set", onclick: setPolicy }, "set policy"),
      el("button", { id: "act-rollout-clear", class: "danger", onclick: run("clear rollout policy", "DELETE", modelPath(model) + "/rollout") }, "clear policy")),
    result, el("p", { class: "muted" }, version ? `serving version ${version}` : "no version serving"));
}
