// "Try it": a request form built from the model's metadata, the answer as a table, a top-k bar
// chart for classifiers, the raw JSON, and the same request as curl and tritonclient code.
import { api, append, card, clear, el, modelPath, objectTable } from "./dom.js";

const NUMPY = {
  BOOL: "bool_", UINT8: "uint8", UINT16: "uint16", UINT32: "uint32", UINT64: "uint64", INT8: "int8",
  INT16: "int16", INT32: "int32", INT64: "int64", FP16: "float16", FP32: "float32", FP64: "float64",
  BYTES: "object_",
};

function product(dims) { return dims.reduce((a, b) => a * b, 1); }

// [height, width, channels] when the item shape looks like an image, else null
function imageShape(dims) {
  if (dims.length === 1 && dims[0] >= 64 && Number.isInteger(Math.sqrt(dims[0]))) {
    const side = Math.sqrt(dims[0]); return [side, side, 1];
  }
  if (dims.length === 2 && dims.every((d) => d >= 8)) return [dims[0], dims[1], 1];
  if (dims.length === 3 && [1, 3, 4].includes(dims[2]) && dims[0] >= 8) return [dims[0], dims[1], dims[2]];
  if (dims.length === 3 && [1, 3].includes(dims[0]) && dims[1] >= 8) return [dims[1], dims[2], dims[0], "chw"];
  return null;
}

function inputField(t, batched) {
  const item = batched ? t.shape.slice(1) : t.shape.slice();
  const known = item.every((d) => d >= 0);
  const shape = el("input", { class: "try-shape", value: item.map((d) => (d < 0 ? 1 : d)).join(","), size: 12 });
  const values = el("textarea", { class: "try-values", rows: 3, dataset: { input: t.name } });
  if (t.datatype === "BYTES") values.placeholder = "one string per line";
  else if (known && product(item) <= 4096) values.value = new Array(product(item)).fill(t.datatype === "BOOL" ? "false" : "0").join(" ");
  const field = el("div", { class: "field", dataset: { input: t.name } },
    el("label", {}, `${t.name} (${t.datatype}, shape ${JSON.stringify(t.shape)})`),
    el("div", { class: "muted" }, "shape of one item: ", shape), values);
  const image = t.datatype !== "BYTES" && known ? imageShape(item) : null;
  if (image) {
    const max = el("input", { class: "try-max", type: "number", value: "255", size: 5 });
    const invert = el("input", { class: "try-invert", type: "checkbox" });
    const file = el("input", { class: "try-image", type: "file", accept: "image/*" });
    file.addEventListener("change", async () => {
      if (!file.files.length) return;
      const bitmap = await createImageBitmap(file.files[0]);
      const [h, w, c, order] = image;
      const canvas = document.createElement("canvas"); canvas.width = w; canvas.height = h;
      const ctx = canvas.getContext("2d"); ctx.drawImage(bitmap, 0, 0, w, h);
      const px = ctx.getImageData(0, 0, w, h).data;
      const scale = Number(max.value) / 255, out = [];
      const value = (v) => (invert.checked ? 255 - v : v) * scale;
      if (order === "chw") {
        for (let ch = 0; ch < c; ch += 1) for (let i = 0; i < w * h; i += 1) out.push(value(c === 1 ? (px[4 * i] + px[4 * i + 1] + px[4 * i + 2]) / 3 : px[4 * i + ch]));
      } else {
        for (let i = 0; i < w * h; i += 1) {
          if (c === 1) out.push(value((px[4 * i] + px[4 * i + 1] + px[4 * i + 2]) / 3));
          else for (let ch = 0; ch < c; ch += 1) out.push(value(px[4 * i + ch]));
        }
      }
      values.value = out.map((v) => Number(v.toFixed(4))).join(" ");
    });
    field.append(el("div", { class: "muted" }, "or an image: ", file, " scaled to 0..", max, " invert ", invert));
  }
  return { name: t.name, datatype: t.datatype, batched, shape, values, field };
}

function parseValues(f) {
  const dims = f.shape.value.split(",").map((s) => s.trim()).filter(Boolean).map(Number);
  if (dims.some((d) => !Number.isInteger(d) || d < 0)) throw new Error(`${f.name}: the shape must be whole numbers`);
  let data;
  if (f.datatype === "BYTES") data = f.values.value.split("\n");
  else {
    const parts = f.values.value.split(/[\s,]+/).filter(Boolean);
    data = f.datatype === "BOOL" ? parts.map((p) => p === "true" || p === "1") : parts.map(Number);
    if (data.some((v) => typeof v === "number" && Number.isNaN(v))) throw new Error(`${f.name}: not a number among the values`);
  }
  const shape = f.batched ? [1, ...dims] : dims;
  if (product(shape) !== data.length) {
    throw new Error(`${f.name}: ${data.length} values for shape [${shape.join(", ")}] (${product(shape)} expected)`);
  }
  return { name: f.name, datatype: f.datatype, shape, data };
}

function quoteShell(text) { return "'" + text.replace(/'/g, "'\\''") + "'"; }

function snippets(model, request) {
  const url = `${location.protocol}//${location.host}${modelPath(model)}/infer`;
  const curl = `curl -s -X POST ${quoteShell(url)} \\\n  -H 'Content-Type: application/json' \\\n  -d ${quoteShell(JSON.stringify(request))}`;
  const py = [
    "import numpy as np",
    "import tritonclient.http as httpclient",
    "",
    `client = httpclient.InferenceServerClient(${JSON.stringify(location.host)})`,
    "inputs = []",
  ];
  for (const t of request.inputs) {
    py.push(`tensor = np.array(${JSON.stringify(t.data)}, dtype=np.${NUMPY[t.datatype]}).reshape(${JSON.stringify(t.shape)})`);
    py.push(`inputs.append(httpclient.InferInput(${JSON.stringify(t.name)}, list(tensor.shape), ${JSON.stringify(t.datatype)}))`);
    py.push("inputs[-1].set_data_from_numpy(tensor)");
  }
  py.push(`result = client.infer(${JSON.stringify(model)}, inputs)`);
  py.push("print(result.get_response())");
  return { curl, python: py.join("\n") };
}

function topK(outputs) {
  for (const o of outputs) {
    if (!["FP32", "FP64", "FP16"].includes(o.datatype)) continue;
    const row = o.shape.length > 1 ? o.data.slice(0, o.shape[o.shape.length - 1]) : o.data;
    if (row.length < 2 || row.length > 1000) continue;
    const sum = row.reduce((a, b) => a + b, 0);
    const probs = row.every((v) => v >= 0 && v <= 1) && Math.abs(sum - 1) < 0.02;
    if (!probs && !/prob|score|logit|softmax/i.test(o.name)) continue;
    const ranked = row.map((v, i) => [i, v]).sort((a, b) => b[1] - a[1]).slice(0, 5);
    return { output: o.name, ranked };
  }
  return null;
}

function showAnswer(node, model, request, answer) {
  clear(node);
  const rows = answer.outputs.map((o) => ({
    output: o.name, datatype: o.datatype, shape: JSON.stringify(o.shape),
    data: o.data.length > 64 ? JSON.stringify(o.data.slice(0, 64)).replace(/]$/, ", …]") : JSON.stringify(o.data),
  }));
  append(node, [el("h3", {}, "Answer"), objectTable(rows, "try-result")]);
  const top = topK(answer.outputs);
  if (top) {
    const best = top.ranked[0][1] || 1;
    append(node, [
      el("p", {}, "predicted class: ", el("strong", { id: "try-predicted" }, String(top.ranked[0][0])), ` (from ${top.output})`),
      el("div", { class: "bars", id: "try-topk" }, top.ranked.map(([cls, v]) => el("div", { class: "bar" },
        el("span", { class: "muted" }, String(cls).padStart(3, " ")),
        el("span", { class: "fill", style: { width: `${Math.max(1, Math.round((240 * v) / best))}px` } }),
        el("span", {}, v.toFixed(4))))),
    ]);
  }
  const code = snippets(model, request);
  append(node, [
    el("details", {}, el("summary", {}, "raw JSON"), el("pre", { id: "try-raw" }, JSON.stringify(answer, null, 2))),
    el("details", {}, el("summary", {}, "curl"), el("pre", { id: "try-curl" }, code.curl)),
    el("details", {}, el("summary", {}, "tritonclient (Python)"), el("pre", { id: "try-python" }, code.python)),
  ]);
}

export function tryIt(model, meta, config) {
  const batched = Number(config?.max_batch_size || 0) > 0;
  const fields = meta.inputs.map((t) => inputField(t, batched));
  const out = el("div", { id: "try-answer" });
  const error = el("p", { class: "error", id: "try-error" });
  const json = el("textarea", { id: "try-json", rows: 6, class: "hidden" });
  const build = () => ({ inputs: fields.map(parseValues) });
  const send = async (request) => {
    error.textContent = "";
    try {
      const answer = await api("POST", modelPath(model) + "/infer", request);
      showAnswer(out, model, request, answer);
    } catch (e) {
      error.textContent = e.message;
    }
  };
  const sendForm = () => {
    let request;
    try { request = build(); } catch (e) { error.textContent = e.message; return; }
    send(request);
  };
  const sendJson = () => {
    let request;
    try { request = JSON.parse(json.value); } catch (e) { error.textContent = `not JSON: ${e.message}`; return; }
    send(request);
  };
  const toJson = () => {
    try { json.value = JSON.stringify(build(), null, 1); } catch (e) { json.value = '{"inputs": []}'; }
    json.classList.remove("hidden");
  };
  return card("Try it", fields.map((f) => f.field),
    el("div", { class: "toolbar" },
      el("button", { id: "try-send", class: "primary", onclick: sendForm }, "send"),
      el("button", { id: "try-as-json", onclick: toJson }, "edit as JSON"),
      el("button", { id: "try-send-json", onclick: sendJson }, "send JSON")),
    json, error, out);
}
