// The ERNIE-Image web page: queue a job (POST /v1/jobs), follow its server-sent events for a live
// progress bar, then fetch the PNG once and show it in the gallery with its parameters and a download
// link. Events are read with fetch() rather than EventSource so the Authorization header can be sent.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { info: null, key: localStorage.getItem("ernie-api-key") || "" };

function headers(extra = {}) {
  const h = { ...extra };
  if (state.key) h["Authorization"] = "Bearer " + state.key;
  return h;
}

async function errorText(res) {
  try {
    const j = await res.json();
    if (j && j.error && j.error.message) return j.error.message;
  } catch (_) { /* not JSON */ }
  return "HTTP " + res.status;
}

function say(text, isError = false) {
  $("message").textContent = text;
  $("message").classList.toggle("error", isError);
}

function needKey(res) {
  if (res.status !== 401) return false;
  $("keyrow").classList.remove("hidden");
  say("This server needs an API key.", true);
  $("apikey").focus();
  return true;
}

async function loadInfo() {
  const res = await fetch("/v1/info", { headers: headers() });
  if (needKey(res)) return;
  if (!res.ok) { say(await errorText(res), true); return; }
  const info = await res.json();
  state.info = info;
  $("model").textContent = info.model + (info.turbo ? " (Turbo)" : "");
  const sel = $("size");
  sel.textContent = "";
  const sizes = info.supported_sizes.length ? info.supported_sizes : [info.defaults.size];
  for (const s of sizes) {
    const o = document.createElement("option");
    o.value = s;
    o.textContent = s.replace("x", "×");
    sel.appendChild(o);
  }
  if (!$("steps").value) $("steps").value = info.defaults.steps;
  if (!$("guidance").value) $("guidance").value = info.defaults.guidance_scale;
  $("steps").max = info.limits.max_steps;
  if (info.api_key_required) $("keyrow").classList.remove("hidden");
}

async function pollQueue() {
  try {
    const res = await fetch("/health");
    const h = await res.json();
    $("queue").textContent = h.status === "ok" ? `queue ${h.queued} · running ${h.running}` : h.status;
  } catch (_) {
    $("queue").textContent = "server unreachable";
  }
}

// Reads a text/event-stream response, calling onEvent(type, data) per event.
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let type = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) type = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data) onEvent(type, JSON.parse(data));
    }
  }
}

function makeCard(params) {
  const card = $("card").content.firstElementChild.cloneNode(true);
  const [w, h] = params.size.split("x").map(Number);
  card.querySelector(".frame").style.aspectRatio = `${w} / ${h}`;
  card.querySelector(".prompt").textContent = params.prompt;
  $("gallery").prepend(card);
  return card;
}

function describe(p) {
  let s = `${p.size} · ${p.steps} steps · guidance ${p.guidance_scale} · seed ${p.seed}`;
  if (p.sampler && p.sampler !== "euler") s += ` · ${p.sampler}`;
  if (p.img2img) s += ` · ${p.img2img.mask ? "inpaint" : "img2img"} strength ${p.img2img.strength}`;
  if (p.negative_prompt) s += ` · negative: ${p.negative_prompt}`;
  return s;
}

// A file's bytes in base64 (for the JSON body's image and mask).
async function base64Of(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

function setProgress(card, fraction, label) {
  const pct = Math.max(0, Math.min(100, Math.round(fraction * 100)));
  card.querySelector(".bar").style.width = pct + "%";
  card.querySelector(".progress").setAttribute("aria-valuenow", String(pct));
  card.querySelector(".placeholder").textContent = label;
}

async function showImage(card, job, seconds) {
  const res = await fetch(`/v1/jobs/${job.id}/images/0`, { headers: headers() });
  if (!res.ok) throw new Error(await errorText(res));
  const url = URL.createObjectURL(await res.blob());
  const img = card.querySelector("img");
  img.onload = () => img.classList.toggle("small", img.naturalWidth < 256);
  img.src = url;
  img.alt = job.params.prompt;
  card.querySelector(".placeholder").classList.add("hidden");
  const a = card.querySelector(".download");
  a.href = url;
  a.download = `ernie-image-${job.params.seed}.png`;
  a.classList.remove("hidden");
  card.querySelector(".params").textContent = describe(job.params) + ` · ${seconds.toFixed(1)} s`;
  card.classList.add("done");
}

function fail(card, text) {
  card.classList.add("failed");
  card.querySelector(".placeholder").textContent = text;
  card.querySelector(".cancel").classList.add("hidden");
}

async function generate(ev) {
  ev.preventDefault();
  const prompt = $("prompt").value.trim();
  if (!prompt) { say("Write a prompt first.", true); return; }
  state.key = $("apikey").value || state.key;
  if (state.key) localStorage.setItem("ernie-api-key", state.key);
  const body = {
    prompt,
    size: $("size").value || undefined,
    steps: $("steps").value ? Number($("steps").value) : undefined,
    guidance_scale: $("guidance").value !== "" ? Number($("guidance").value) : undefined,
    seed: $("seed").value !== "" ? Number($("seed").value) : undefined,
    response_format: "b64_json",
  };
  const neg = $("negative").value.trim();
  if (neg) body.negative_prompt = neg;
  if ($("sampler").value !== "euler") body.sampler = $("sampler").value;
  if ($("shift").value !== "") body.shift = Number($("shift").value);
  // img2img: the PNG in base64, resized to the chosen size by the server; the mask with it.
  const image = $("image").files[0], mask = $("mask").files[0];
  if (mask && !image) { say("A mask needs an init image.", true); return; }
  if (image) {
    body.image = await base64Of(image);
    body.resize = true;
    if ($("strength").value !== "") body.strength = Number($("strength").value);
    if (mask) body.mask = await base64Of(mask);
  }

  const started = performance.now();
  const res = await fetch("/v1/jobs", {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(body),
  });
  if (needKey(res)) return;
  if (!res.ok) { say(await errorText(res), true); return; }
  const job = await res.json();
  say("");
  if (!state.info) await loadInfo();
  const card = makeCard(job.params);
  card.dataset.job = job.id;
  card.querySelector(".params").textContent = describe(job.params);
  card.querySelector(".cancel").addEventListener("click", async () => {
    await fetch(`/v1/jobs/${job.id}`, { method: "DELETE", headers: headers() });
  });
  setProgress(card, 0, "queued");
  pollQueue();

  let ended = false;
  try {
    const ev = await fetch(`/v1/jobs/${job.id}/events`, { headers: headers() });
    if (!ev.ok) throw new Error(await errorText(ev));
    await readEvents(ev, async (type, data) => {
      if (type === "queued") setProgress(card, 0, `queued (position ${data.position + 1})`);
      else if (type === "progress") {
        const frac = data.phase === "denoise" && data.total ? data.step / data.total : data.phase === "decode" ? 1 : 0;
        setProgress(card, frac, data.phase === "denoise" ? `step ${data.step} / ${data.total}` : data.phase);
      } else if (type === "done") {
        ended = true;
        setProgress(card, 1, "fetching");
        card.querySelector(".cancel").classList.add("hidden");
        try { await showImage(card, job, (performance.now() - started) / 1000); }
        catch (e) { fail(card, e.message); }
      } else if (type === "error" || type === "cancelled") {
        ended = true;
        fail(card, type === "cancelled" ? "cancelled" : (data.error && data.error.message) || "failed");
      }
    });
  } catch (e) {
    if (!ended) fail(card, e.message);
  }
  pollQueue();
}

$("form").addEventListener("submit", generate);
$("apikey").addEventListener("change", () => { state.key = $("apikey").value; localStorage.setItem("ernie-api-key", state.key); loadInfo(); });
$("apikey").value = state.key;
loadInfo();
pollQueue();
setInterval(pollQueue, 5000);
