// The ERNIE-Image web page: queue a job (POST /v1/jobs), follow its server-sent events for a live
// progress bar and latent previews, then show its images in the gallery with their parameters, a download
// link and "Reuse parameters". The gallery is the server's history (GET /v1/jobs), so it survives a reload;
// dropping a PNG made by ERNIE-Image fills the form from its `ernie-image` metadata chunk. Events are read
// with fetch() rather than EventSource so the Authorization header can be sent.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { info: null, key: localStorage.getItem("ernie-api-key") || "", following: new Set() };

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
  if (needKey(res)) return false;
  if (!res.ok) { say(await errorText(res), true); return false; }
  const info = await res.json();
  state.info = info;
  $("model").textContent = info.model + (info.turbo ? " (Turbo)" : "");
  const sel = $("size");
  sel.textContent = "";
  const custom = document.createElement("option");
  custom.value = "";
  custom.textContent = "custom";
  sel.appendChild(custom);
  const sizes = info.supported_sizes.length ? info.supported_sizes : [info.defaults.size];
  for (const s of sizes) {
    const o = document.createElement("option");
    o.value = s;
    o.textContent = s.replace("x", "×");
    sel.appendChild(o);
  }
  // Any width and height: multiples of the model's scale factor up to the server's limit.
  for (const id of ["width", "height"]) {
    $(id).step = info.scale_factor;
    $(id).min = info.scale_factor;
    $(id).max = info.limits.max_side;
  }
  if (!$("width").value) {
    const [w, h] = info.defaults.size.split("x");
    $("width").value = w;
    $("height").value = h;
  }
  syncPreset();
  if (!$("steps").value) $("steps").value = info.defaults.steps;
  if (!$("guidance").value) $("guidance").value = info.defaults.guidance_scale;
  $("steps").max = info.limits.max_steps;
  $("n").max = info.limits.max_images;
  $("pe-row").classList.toggle("hidden", !info.prompt_enhancer);
  if (info.samplers) {
    for (const o of [...$("sampler").options]) o.disabled = !info.samplers.includes(o.value);
  }
  if (info.loras) loadLoras();
  if (info.api_key_required) $("keyrow").classList.remove("hidden");
  return true;
}

async function loadLoras() {
  const res = await fetch("/v1/loras", { headers: headers() });
  if (!res.ok) return;
  const list = await res.json();
  const sel = $("lora");
  for (const l of list.data) {
    if ([...sel.options].some((o) => o.value === l.name)) continue;
    const o = document.createElement("option");
    o.value = l.name;
    o.textContent = l.name;
    sel.appendChild(o);
  }
  $("lora-row").classList.toggle("hidden", list.data.length === 0);
}

function syncPreset() {
  const v = `${$("width").value}x${$("height").value}`;
  $("size").value = [...$("size").options].some((o) => o.value === v) ? v : "";
}

async function pollQueue() {
  try {
    const res = await fetch("/health");
    const h = await res.json();
    let text = h.status;
    if (h.status === "ok") text = h.queued || h.running ? `queue ${h.queued} · running ${h.running}` : "idle";
    $("queue").textContent = text;
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
      if (data) await onEvent(type, JSON.parse(data));
    }
  }
}

function makeCard(job, atEnd = false) {
  const params = job.params;
  const card = $("card").content.firstElementChild.cloneNode(true);
  const [w, h] = params.size.split("x").map(Number);
  card.dataset.job = job.id;
  card.querySelector(".frame").style.aspectRatio = `${w} / ${h}`;
  card.querySelector(".prompt").textContent = params.prompt;
  card.querySelector(".params").textContent = describe(params);
  card.querySelector(".cancel").addEventListener("click", async () => {
    await fetch(`/v1/jobs/${job.id}`, { method: "DELETE", headers: headers() });
  });
  card.querySelector(".reuse").addEventListener("click", () => { fillForm(params); say("Parameters loaded."); });
  if (atEnd) $("gallery").appendChild(card);
  else $("gallery").prepend(card);
  return card;
}

// A float the server read as float32 (0.800000011920929), as it was typed (0.8).
const short = (v) => Number(Number(v).toPrecision(6));

function describe(p) {
  let s = `${p.size} · ${p.steps} steps · guidance ${short(p.guidance_scale)} · seed ${p.seed}`;
  if (p.n > 1) s += ` · ${p.n} images`;
  if (p.sampler && p.sampler !== "euler") s += ` · ${p.sampler}`;
  if (p.use_pe) s += " · prompt enhancer";
  if (p.loras && p.loras.length) s += " · " + p.loras.map((l) => `LoRA ${l.name}:${short(l.scale)}`).join(", ");
  if (p.img2img) s += ` · ${p.img2img.mask ? "inpaint" : "img2img"} strength ${short(p.img2img.strength)}`;
  if (p.negative_prompt) s += ` · negative: ${p.negative_prompt}`;
  return s;
}

// Fills the form from a job's params (GET /v1/jobs) or a PNG's `ernie-image` JSON (cfg, width/height keys).
function fillForm(p) {
  const set = (id, v) => { if (v !== undefined && v !== null) $(id).value = String(v); };
  set("prompt", p.prompt);
  $("negative").value = p.negative_prompt || "";
  let w = p.width, h = p.height;
  if (p.size) [w, h] = p.size.split("x").map(Number);
  set("width", w);
  set("height", h);
  syncPreset();
  set("steps", p.steps);
  set("guidance", short(p.guidance_scale !== undefined ? p.guidance_scale : p.cfg));
  set("seed", p.seed);
  if (p.sampler) $("sampler").value = p.sampler;
  $("shift").value = p.shift ? String(short(p.shift)) : "";
  set("n", p.n !== undefined ? p.n : 1);
  const pe = p.use_pe !== undefined ? p.use_pe : p.prompt_enhancer;
  $("use-pe").checked = !!pe;
  const lora = (p.loras || []).find((l) => !l.from_tag);
  if (lora) {
    const sel = $("lora");
    if (![...sel.options].some((o) => o.value === lora.name)) {
      const o = document.createElement("option");
      o.value = o.textContent = lora.name;
      sel.appendChild(o);
    }
    sel.value = lora.name;
    $("lora-scale").value = String(short(lora.scale));
    $("lora-row").classList.remove("hidden");
  } else {
    $("lora").value = "";
  }
  if (p.img2img && p.img2img.strength) $("strength").value = String(short(p.img2img.strength));
}

// The text chunks of a PNG (tEXt, and iTXt uncompressed or deflated) as {keyword: text}.
async function pngText(buf) {
  const b = new Uint8Array(buf);
  const sig = [137, 80, 78, 71, 13, 10, 26, 10];
  if (b.length < 8 || sig.some((v, i) => b[i] !== v)) throw new Error("not a PNG file");
  const dv = new DataView(buf);
  const out = {};
  const latin1 = new TextDecoder("latin1"), utf8 = new TextDecoder("utf-8");
  for (let at = 8; at + 12 <= b.length;) {
    const len = dv.getUint32(at);
    const type = String.fromCharCode(...b.subarray(at + 4, at + 8));
    const data = b.subarray(at + 8, at + 8 + len);
    at += 12 + len;
    if (type === "IEND") break;
    const nul = data.indexOf(0);
    if (nul < 0) continue;
    const key = latin1.decode(data.subarray(0, nul));
    if (type === "tEXt") {
      out[key] = latin1.decode(data.subarray(nul + 1));
    } else if (type === "iTXt") {
      const compressed = data[nul + 1] === 1;
      let p = data.indexOf(0, nul + 3);      // end of the language tag
      p = data.indexOf(0, p + 1);            // end of the translated keyword
      let text = data.subarray(p + 1);
      if (compressed) {
        const s = new Blob([text]).stream().pipeThrough(new DecompressionStream("deflate"));
        text = new Uint8Array(await new Response(s).arrayBuffer());
      }
      out[key] = utf8.decode(text);
    }
  }
  return out;
}

async function loadPng(file) {
  try {
    const text = await pngText(await file.arrayBuffer());
    if (!text["ernie-image"]) throw new Error("this PNG carries no ERNIE-Image parameters");
    fillForm(JSON.parse(text["ernie-image"]));
    say(`Parameters loaded from ${file.name}.`);
  } catch (e) {
    say(`${file.name}: ${e.message}`, true);
  }
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

function showPreview(card, data) {
  const img = card.querySelector(".frame img");
  img.classList.add("preview");
  img.src = data.image;
  card.querySelector(".placeholder").classList.add("hidden");
  card.dataset.previews = String(Number(card.dataset.previews || 0) + 1);
}

async function blobUrl(path) {
  const res = await fetch(path, { headers: headers() });
  if (!res.ok) throw new Error(await errorText(res));
  return URL.createObjectURL(await res.blob());
}

// A finished job's images (from the history: job.data[].url), the first one large, the rest as thumbnails.
async function showImages(card, job, seconds) {
  const items = job.data || [];
  if (!items.length) throw new Error(job.images_gone || "the images are no longer kept");
  const urls = await Promise.all(items.map((d) => blobUrl(d.url)));
  const img = card.querySelector(".frame img");
  const a = card.querySelector(".download");
  const select = (k) => {
    img.onload = () => img.classList.toggle("small", img.naturalWidth < 256);
    img.classList.remove("preview");
    img.src = urls[k];
    a.href = urls[k];
    a.download = `ernie-image-${items[k].seed}.png`;
    card.querySelectorAll(".thumbs img").forEach((t, i) => t.classList.toggle("current", i === k));
  };
  img.alt = job.params.prompt;
  const thumbs = card.querySelector(".thumbs");
  thumbs.textContent = "";
  if (urls.length > 1) {
    urls.forEach((u, k) => {
      const t = document.createElement("img");
      t.src = u;
      t.alt = `image ${k + 1} (seed ${items[k].seed})`;
      t.addEventListener("click", () => select(k));
      thumbs.appendChild(t);
    });
    thumbs.classList.remove("hidden");
  }
  select(0);
  card.querySelector(".placeholder").classList.add("hidden");
  a.classList.remove("hidden");
  card.querySelector(".reuse").classList.remove("hidden");
  card.querySelector(".cancel").classList.add("hidden");
  card.querySelector(".params").textContent = describe(job.params) + (seconds ? ` · ${seconds.toFixed(1)} s` : "");
  card.classList.add("done");
}

function fail(card, text) {
  card.classList.add("failed");
  const ph = card.querySelector(".placeholder");
  ph.classList.remove("hidden");
  ph.textContent = text;
  card.querySelector(".frame img").removeAttribute("src");
  card.querySelector(".cancel").classList.add("hidden");
  card.querySelector(".reuse").classList.remove("hidden");
}

async function jobState(id) {
  const res = await fetch(`/v1/jobs/${id}`, { headers: headers() });
  if (!res.ok) throw new Error(await errorText(res));
  return res.json();
}

// Follows a waiting or running job's events to its end, then shows its images.
async function follow(card, job, started) {
  if (state.following.has(job.id)) return;
  state.following.add(job.id);
  let ended = false;
  try {
    const ev = await fetch(`/v1/jobs/${job.id}/events`, { headers: headers() });
    if (!ev.ok) throw new Error(await errorText(ev));
    await readEvents(ev, async (type, data) => {
      if (type === "queued") setProgress(card, 0, `queued (position ${data.position + 1})`);
      else if (type === "progress") {
        const frac = data.phase === "denoise" && data.total ? data.step / data.total : data.phase === "decode" ? 1 : 0;
        setProgress(card, frac, data.phase === "denoise" ? `step ${data.step} / ${data.total}` : data.phase);
        if (data.phase === "start" || (data.phase === "denoise" && data.step === 0)) pollQueue();
      } else if (type === "preview") {
        showPreview(card, data);
      } else if (type === "done") {
        ended = true;
        setProgress(card, 1, "fetching");
        pollQueue();
        try { await showImages(card, await jobState(job.id), started ? (performance.now() - started) / 1000 : 0); }
        catch (e) { fail(card, e.message); }
      } else if (type === "error" || type === "cancelled") {
        ended = true;
        pollQueue();
        fail(card, type === "cancelled" ? "cancelled" : (data.error && data.error.message) || "failed");
      }
    });
  } catch (e) {
    if (!ended) fail(card, e.message);
  } finally {
    state.following.delete(job.id);
  }
  pollQueue();
}

// The gallery from the server's history: finished jobs with their images, and the waiting and running
// ones (followed live). The list comes newest first and is appended in order, after any card already shown.
async function loadHistory() {
  const res = await fetch("/v1/jobs?limit=100", { headers: headers() });
  if (!res.ok) return;
  const list = await res.json();
  for (const job of list.data) {
    if (document.querySelector(`.card[data-job="${job.id}"]`)) continue;
    const live = job.status === "queued" || job.status === "running";
    if (!live && !(job.status === "succeeded" && job.data && job.data.length)) continue;
    const card = makeCard(job, true);
    if (live) {
      setProgress(card, job.total ? job.step / job.total : 0, job.status);
      follow(card, job, 0);
    } else {
      showImages(card, job, job.timings && job.timings.run_s).catch((e) => fail(card, e.message));
    }
  }
}

async function generate(ev) {
  ev.preventDefault();
  const prompt = $("prompt").value.trim();
  if (!prompt) { say("Write a prompt first.", true); return; }
  state.key = $("apikey").value || state.key;
  if (state.key) localStorage.setItem("ernie-api-key", state.key);
  const num = (id) => ($(id).value !== "" ? Number($(id).value) : undefined);
  const w = num("width"), h = num("height");
  const body = {
    prompt,
    size: w && h ? `${w}x${h}` : undefined,
    n: num("n"),
    steps: num("steps"),
    guidance_scale: num("guidance"),
    seed: num("seed"),
  };
  const neg = $("negative").value.trim();
  if (neg) body.negative_prompt = neg;
  if ($("sampler").value !== "euler") body.sampler = $("sampler").value;
  if ($("shift").value !== "") body.shift = Number($("shift").value);
  if ($("use-pe").checked && state.info && state.info.prompt_enhancer) body.use_pe = true;
  if ($("lora").value) body.loras = [{ name: $("lora").value, scale: num("lora-scale") ?? 1 }];
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
  const card = makeCard(job);
  setProgress(card, 0, "queued");
  pollQueue();
  await follow(card, job, started);
}

// Dropping a PNG anywhere on the page (not on the file inputs) loads its parameters.
let dragDepth = 0;
const isFileDrag = (e) => e.dataTransfer && [...e.dataTransfer.types].includes("Files");
window.addEventListener("dragenter", (e) => {
  if (!isFileDrag(e) || e.target instanceof HTMLInputElement) return;
  dragDepth++;
  $("dropzone").classList.remove("hidden");
});
window.addEventListener("dragleave", () => { if (--dragDepth <= 0) { dragDepth = 0; $("dropzone").classList.add("hidden"); } });
window.addEventListener("dragover", (e) => { if (isFileDrag(e) && !(e.target instanceof HTMLInputElement)) e.preventDefault(); });
window.addEventListener("drop", (e) => {
  dragDepth = 0;
  $("dropzone").classList.add("hidden");
  if (e.target instanceof HTMLInputElement) return;  // the init image and mask inputs take their own files
  e.preventDefault();
  const f = e.dataTransfer.files[0];
  if (f) loadPng(f);
});

$("form").addEventListener("submit", generate);
$("random-seed").addEventListener("click", () => { $("seed").value = "-1"; });
$("size").addEventListener("change", () => {
  if (!$("size").value) return;
  const [w, h] = $("size").value.split("x");
  $("width").value = w;
  $("height").value = h;
});
for (const id of ["width", "height"]) $(id).addEventListener("input", syncPreset);
$("apikey").addEventListener("change", async () => {
  state.key = $("apikey").value;
  localStorage.setItem("ernie-api-key", state.key);
  if (await loadInfo()) loadHistory();
});
$("apikey").value = state.key;
loadInfo().then((ok) => { if (ok) loadHistory(); });
pollQueue();
setInterval(pollQueue, 5000);
