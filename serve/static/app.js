// vidax-serve's page: a form, the queue with live progress (Server-Sent Events) and a gallery.
// Plain JavaScript, no build step; every call is the public API under /v1.
"use strict";

const FINISHED = ["succeeded", "failed", "cancelled"];
const NUMBER_FIELDS = ["height", "width", "frames", "steps", "guidance", "shift", "fps", "seed"];
const streams = new Map(); // job id -> its EventSource
window.vidaxProgress = []; // every progress state the page showed (the browser test reads it)
let model = null;
let nextPage = null;

const $ = (selector) => document.querySelector(selector);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== null && value !== undefined && value !== false) node.setAttribute(key, value === true ? "" : value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

async function api(path, options = {}) {
  const response = await fetch(path, { credentials: "same-origin", ...options });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error ? body.error.message : `HTTP ${response.status}`);
  return body;
}

// --- the form -----------------------------------------------------------------------------

function buildForm() {
  const fields = $("#fields");
  const defaults = model.defaults;
  for (const name of NUMBER_FIELDS) {
    const step = ["guidance", "shift", "fps"].includes(name) ? "any" : "1";
    fields.append(el("label", {}, name, el("input", { name, type: "number", step, inputmode: "decimal",
      placeholder: defaults[name] ?? "" })));
  }
  fields.append(el("label", {}, "sampler", el("input", { name: "sampler", type: "text", placeholder: defaults.sampler ?? "default" })));
  for (const flag of model.family_fields) {
    const input = flag.kind === "bool"
      ? el("select", { name: flag.field, "data-kind": "bool" }, el("option", { value: "" }, "default"),
        el("option", { value: "true" }, "on"), el("option", { value: "false" }, "off"))
      : el("input", { name: flag.field, type: flag.kind === "str" ? "text" : "number", step: "any",
        "data-kind": flag.kind, placeholder: defaults[flag.field] ?? "" });
    fields.append(el("label", { title: flag.help }, flag.field, input));
  }
  // one image; a repeatable flag's files (in the order chosen); or one clip, or its frames as images (by name)
  for (const [role, upload] of Object.entries(model.uploads)) {
    const image = upload.kind === "image";
    const title = image ? `${upload.flag}: one image`
      : upload.multiple ? `${upload.flag}: one or more files, in order`
      : `${upload.flag}: a video or .npy, or its frames as images (in file-name order)`;
    $("#uploads").append(el("label", { title }, role, el("input", { name: role, type: "file", "data-upload": upload.kind,
      multiple: !image, accept: image ? "image/*" : "video/*,image/*,.npy" })));
  }
}

function formRequest() {
  const request = {};
  for (const input of $("#form").querySelectorAll("input:not([type=file]), textarea, select")) {
    const text = input.value.trim();
    if (text === "") continue;
    const kind = input.dataset.kind;
    if (input.type === "number") request[input.name] = Number(text);
    else if (kind === "bool") request[input.name] = text === "true";
    else request[input.name] = text;
  }
  const files = [...$("#form").querySelectorAll("input[type=file]")].filter((input) => input.files.length);
  return { request, files };
}

async function submit(request, files = []) {
  let options;
  if (files.length) {
    const form = new FormData();
    form.append("request", JSON.stringify(request));
    for (const input of files) for (const file of input.files) form.append(input.name, file);
    options = { method: "POST", body: form };
  } else {
    options = { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(request) };
  }
  const job = await api("/v1/videos", options);
  const status = await api(`/v1/videos/${job.id}`);
  show(status);
  watch(job.id);
}

// --- jobs ---------------------------------------------------------------------------------

function progressLine(job) {
  const p = job.progress;
  if (job.status === "queued") return "waiting";
  if (!p) return job.status;
  let line = p.stage;
  if (p.total) line += ` ${p.step}/${p.total}`;
  if (p.eta !== null && p.eta !== undefined) line += ` · ${p.eta.toFixed(1)} s left`;
  return line;
}

function settingsLine(job) {
  const s = job.settings;
  return `seed ${s.seed} · ${s.width}×${s.height} · ${s.frames} frames @ ${s.fps} fps · ${s.steps} steps · guidance ${s.guidance}`;
}

function activeItem(job) {
  const p = job.progress || {};
  const bar = el("progress", { max: p.total || 1 });
  if (job.status === "running" && p.total) bar.value = p.step;
  else if (job.status === "queued") bar.value = 0;
  return el("li", { class: "job", id: `job-${job.id}`, "data-status": job.status },
    el("div", { class: "head" }, el("span", { class: "prompt" }, job.request.prompt),
      el("span", { class: "pill status" }, job.status)),
    bar,
    el("div", { class: "row" }, el("span", { class: "stage" }, progressLine(job)),
      el("button", { type: "button", class: "cancel", onclick: () => cancel(job.id) }, "Cancel")));
}

function finishedItem(job) {
  const video = job.status === "succeeded" && job.content && !job.request.format
    ? el("video", { src: job.content, controls: true, playsinline: true, loop: true, muted: true, preload: "metadata" })
    : null;
  const download = job.status === "succeeded" && job.request.format ? el("a", { href: job.content }, "download frames (.npy)") : null;
  const copy = el("button", { type: "button", onclick: () => navigator.clipboard?.writeText(job.command) }, "Copy");
  const again = el("button", { type: "button", class: "again", disabled: Object.keys(job.uploads).length > 0,
    title: "the same request (its seed too)", onclick: () => submit(job.request).catch(showError) }, "Run again");
  return el("li", { class: "job", id: `job-${job.id}`, "data-status": job.status },
    el("div", { class: "head" }, el("span", { class: "prompt" }, job.request.prompt),
      el("span", { class: "pill status" }, job.status)),
    video, download,
    job.error ? el("div", { class: "error" }, job.error) : null,
    el("div", { class: "settings" }, settingsLine(job),
      job.times && job.times.denoise ? ` · took ${Object.values(job.times).reduce((a, b) => a + b, 0).toFixed(1)} s` : ""),
    el("code", {}, job.command),
    el("div", { class: "row" }, copy, again));
}

function show(job, older = false) {
  const old = document.getElementById(`job-${job.id}`);
  const finished = FINISHED.includes(job.status);
  const item = finished ? finishedItem(job) : activeItem(job);
  if (old && old.parentElement === (finished ? $("#gallery") : $("#queue")) && !finished) {
    old.replaceWith(item);
  } else {
    if (old) old.remove();
    const list = finished ? $("#gallery") : $("#queue");
    if (older) list.append(item);
    else if (finished || job.status !== "queued") list.prepend(item);
    else list.append(item);
  }
  if (job.progress && job.status === "running") {
    window.vidaxProgress.push({ id: job.id, stage: job.progress.stage, step: job.progress.step, total: job.progress.total });
  }
  $("#queue-empty").hidden = $("#queue").children.length > 0;
}

function watch(id) {
  if (streams.has(id)) return;
  const source = new EventSource(`/v1/videos/${id}/events`);
  streams.set(id, source);
  source.addEventListener("status", (event) => {
    const job = JSON.parse(event.data);
    show(job);
    if (FINISHED.includes(job.status)) stopWatching(id);
  });
  source.onerror = () => { stopWatching(id); setTimeout(() => refresh(id), 1000); };
}

function stopWatching(id) {
  const source = streams.get(id);
  if (source) source.close();
  streams.delete(id);
}

async function refresh(id) {
  const job = await api(`/v1/videos/${id}`);
  show(job);
  if (!FINISHED.includes(job.status)) watch(id);
}

async function cancel(id) {
  try {
    const answer = await api(`/v1/videos/${id}`, { method: "DELETE" });
    if (answer.status === "cancelled") await refresh(id);
  } catch (err) { showError(err); }
}

async function loadPage(before = null) {
  const page = await api(`/v1/videos?limit=24${before === null ? "" : `&before=${before}`}`);
  const older = before !== null; // an older page goes below what is shown
  for (const job of older ? page.data : page.data.slice().reverse()) {
    show(job, older);
    if (!FINISHED.includes(job.status)) watch(job.id);
  }
  nextPage = page.next;
  $("#more").hidden = nextPage === null;
}

function showError(err) { $("#form-error").textContent = err.message; }

async function health() {
  try {
    const h = await api("/health");
    $("#health").textContent = h.status === "failed" ? `failed: ${h.error}` : h.status;
  } catch (err) { $("#health").textContent = "offline"; }
}

async function main() {
  const models = await api("/v1/models");
  model = models.data[0];
  $("#model").textContent = model.id;
  buildForm();
  $("#form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("#form-error").textContent = "";
    const { request, files } = formRequest();
    try { await submit(request, files); } catch (err) { showError(err); }
  });
  $("#more").addEventListener("click", () => loadPage(nextPage));
  await loadPage();
  health();
  setInterval(health, 5000);
  document.body.dataset.ready = "true";
}

main().catch(showError);
