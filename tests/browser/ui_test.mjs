// Browser test of the `ernie-image serve` web page in headless Debian Chromium (playwright-core):
// types a prompt with a custom width and height (not a preset), clicks Generate, watches the progress bar
// move and at least one live preview frame, waits for the image, checks it, its download link, and that
// the header goes back to "idle"; an img2img run (an init image, another sampler); a batch of two with a
// random seed; then reloads the page and finds the gallery rebuilt from the server's history, reuses a
// card's parameters, and drops a PNG on the page to fill the form from its metadata; saves a screenshot.
// usage: node ui_test.mjs URL SCREENSHOT.png TESTS_DATA_DIR
import path from "node:path";
import { chromium } from "playwright-core";

const [url, shot, data] = process.argv.slice(2);
const fail = (msg) => { console.error("FAIL:", msg); process.exitCode = 1; };

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-quic", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });

  await page.goto(url);
  await page.waitForFunction(() => document.getElementById("width").value !== "", null, { timeout: 30000 });
  const info = await page.evaluate(() => fetch("/v1/info").then((r) => r.json()));
  const sf = info.scale_factor;
  const w = 10 * sf, h = 6 * sf, size = `${w}x${h}`;
  if (info.supported_sizes.includes(size)) fail(`${size} is a preset; the test wants a custom size`);
  const peShown = await page.$eval("#pe-row", (e) => !e.classList.contains("hidden"));
  if (peShown !== info.prompt_enhancer) fail(`prompt enhancer toggle shown=${peShown}, server has it=${info.prompt_enhancer}`);
  // The server runs with --lora-dir: the LoRA control lists its files.
  await page.waitForFunction(() => document.querySelectorAll("#lora option").length > 1, null, { timeout: 10000 })
    .catch(() => fail("the LoRA control lists no LoRA"));
  const loraShown = await page.$eval("#lora-row", (e) => !e.classList.contains("hidden"));
  const loraNames = await page.$$eval("#lora option", (os) => os.map((o) => o.value));
  if (!info.loras || !loraShown || !loraNames.includes("tiny_lora")) fail(`LoRA controls: shown=${loraShown} ${JSON.stringify(loraNames)}`);

  await page.fill("#width", String(w));
  await page.fill("#height", String(h));
  await page.fill("#prompt", "a red fox sitting in fresh snow, watercolor");
  await page.fill("#negative", "blurry");
  // Enough steps that denoising outlasts the page opening the job's event stream even on a loaded machine:
  // previews are made only while a stream listens, and a stream that connects after the last step sees none.
  await page.fill("#steps", "240");
  await page.fill("#guidance", "1");  // no second (negative) row: half the work on the CPU
  await page.fill("#seed", "42");

  // Record every value the progress bar takes, and every preview frame drawn.
  await page.evaluate(() => {
    window.__progress = [];
    window.__previews = 0;
    new MutationObserver((ms) => {
      for (const m of ms) {
        if (m.attributeName === "aria-valuenow") window.__progress.push(Number(m.target.getAttribute("aria-valuenow")));
        if (m.attributeName === "src" && (m.target.getAttribute("src") || "").startsWith("data:image/png")) window.__previews++;
      }
    }).observe(document.getElementById("gallery"), { subtree: true, attributes: true, attributeFilter: ["aria-valuenow", "src"] });
  });
  await page.click("#generate");
  await page.waitForSelector('.card.done img[src^="blob:"]', { timeout: 120000 });

  const seen = await page.evaluate(() => window.__progress);
  const between = seen.filter((v) => v > 0 && v < 100);
  if (between.length < 2) fail(`the progress bar did not move through intermediate values: ${JSON.stringify(seen)}`);
  for (let i = 1; i < seen.length; ++i) if (seen[i] < seen[i - 1]) fail(`progress went backwards: ${JSON.stringify(seen)}`);
  if (seen[seen.length - 1] !== 100) fail(`progress ended at ${seen[seen.length - 1]}`);
  const previews = await page.evaluate(() => window.__previews);
  if (previews < 1) fail("no live preview frame was drawn");

  const img = await page.$eval(".card.done .frame img", (i) => ({ w: i.naturalWidth, h: i.naturalHeight, complete: i.complete }));
  if (!img.complete || img.w !== w || img.h !== h) fail(`image is ${img.w}x${img.h}, want ${size}`);
  const link = await page.$eval(".card.done a.download", (a) => ({ href: a.href, download: a.download, hidden: a.classList.contains("hidden") }));
  if (!link.href.startsWith("blob:") || link.download !== "ernie-image-42.png" || link.hidden) fail(`download link ${JSON.stringify(link)}`);
  const params = await page.$eval(".card.done .params", (p) => p.textContent);
  if (!params.includes("240 steps") || !params.includes("seed 42") || !params.includes(size)) fail(`parameters shown: ${params}`);
  const prompt = await page.$eval(".card.done .prompt", (p) => p.textContent);
  if (!prompt.includes("red fox")) fail(`prompt shown: ${prompt}`);
  // The header's state returns to idle once the job is done (not "running 1"), well before the 5 s poll.
  await page.waitForFunction(() => document.getElementById("queue").textContent === "idle", null, { timeout: 3000 })
    .catch(async () => fail(`header says "${await page.$eval("#queue", (e) => e.textContent)}" after the job finished`));
  if (errors.length) fail(`page errors: ${errors.join("; ")}`);

  // img2img from the page: an init image, the DPM++ 2M sampler; the card names both.
  await page.fill("#steps", "6");
  await page.selectOption("#sampler", "dpmpp_2m");
  await page.setInputFiles("#image", path.join(data, "img2img", "case2_input.png"));
  await page.fill("#strength", "0.5");
  await page.click("#generate");
  await page.waitForFunction(() => document.querySelectorAll(".card.done, .card.failed").length >= 2 ||
                                   document.getElementById("message").classList.contains("error"), null, { timeout: 120000 })
    .catch((e) => fail(`img2img: no result (${e.message}); page errors: ${errors.join("; ")}`));
  const state2 = await page.evaluate(() => ({ message: document.getElementById("message").textContent,
                                              failed: [...document.querySelectorAll(".card.failed .placeholder")].map((e) => e.textContent) }));
  if (state2.failed.length || state2.message) fail(`img2img did not run: ${JSON.stringify(state2)}`);
  const p2 = await page.$eval(".card.done .params", (p) => p.textContent);
  if (!p2.includes("dpmpp_2m") || !p2.includes("img2img strength 0.5")) fail(`img2img parameters shown: ${p2}`);
  const img2 = await page.$eval(".card.done .frame img", (i) => [i.naturalWidth, i.naturalHeight]);
  if (img2[0] !== w || img2[1] !== h) fail(`img2img image is ${img2}, want ${size} (the init image resized)`);

  // A batch of two with a random seed (the button sets -1) and a LoRA: two thumbnails, a real seed shown.
  await page.setInputFiles("#image", []);
  await page.selectOption("#sampler", "euler");
  await page.fill("#prompt", "two lighthouses");
  await page.fill("#n", "2");
  await page.click("#random-seed");
  await page.selectOption("#lora", "tiny_lora");
  await page.fill("#lora-scale", "0.8");
  if ((await page.inputValue("#seed")) !== "-1") fail("the random seed button did not set -1");
  await page.click("#generate");
  await page.waitForFunction(() => document.querySelectorAll(".card.done").length >= 3, null, { timeout: 120000 })
    .catch((e) => fail(`batch: no result (${e.message})`));
  const batch = await page.$eval(".card.done", (c) => ({ thumbs: c.querySelectorAll(".thumbs img").length,
                                                          params: c.querySelector(".params").textContent }));
  if (batch.thumbs !== 2 || !batch.params.includes("2 images") || /seed -1\b/.test(batch.params) || !/seed \d+/.test(batch.params) ||
      !batch.params.includes("LoRA tiny_lora:0.8"))
    fail(`batch card: ${JSON.stringify(batch)}`);

  // Reload: the gallery rebuilds itself from GET /v1/jobs, newest first, images and all.
  await page.reload();
  await page.waitForFunction(() => document.querySelectorAll('.card.done .frame img[src^="blob:"]').length >= 3, null,
                             { timeout: 30000 })
    .catch(async () => fail(`after a reload the gallery has ${await page.$$eval(".card", (c) => c.length)} cards`));
  const rebuilt = await page.$$eval(".card.done", (cs) => cs.map((c) => c.querySelector(".prompt").textContent));
  if (rebuilt.length !== 3 || rebuilt[0] !== "two lighthouses" || !rebuilt[2].includes("red fox"))
    fail(`rebuilt gallery: ${JSON.stringify(rebuilt)}`);
  const reimg = await page.$eval(".card.done:last-child .frame img", (i) => [i.naturalWidth, i.naturalHeight]);
  if (reimg[0] !== w || reimg[1] !== h) fail(`rebuilt image is ${reimg}, want ${size}`);

  // "Reuse parameters" on the batch's card brings its LoRA back; on the first job's card, its parameters.
  await page.selectOption("#lora", "");
  await page.click(".card.done:first-child .reuse");
  const reusedLora = await page.evaluate(() => [document.getElementById("lora").value, document.getElementById("lora-scale").value,
                                                document.getElementById("n").value]);
  if (JSON.stringify(reusedLora) !== JSON.stringify(["tiny_lora", "0.8", "2"])) fail(`reuse LoRA and batch: ${reusedLora}`);
  await page.fill("#prompt", "");
  await page.click(".card.done:last-child .reuse");
  const reused = await page.evaluate(() => ({ prompt: document.getElementById("prompt").value, seed: document.getElementById("seed").value,
                                              steps: document.getElementById("steps").value, w: document.getElementById("width").value,
                                              h: document.getElementById("height").value, neg: document.getElementById("negative").value }));
  if (!reused.prompt.includes("red fox") || reused.seed !== "42" || reused.steps !== "240" || reused.w !== String(w) ||
      reused.h !== String(h))
    fail(`reuse parameters: ${JSON.stringify(reused)}`);

  // Dropping a PNG (the img2img result, fetched from the history) fills the form from its metadata.
  await page.evaluate(() => {
    for (const id of ["prompt", "negative", "seed", "steps", "width", "height"]) document.getElementById(id).value = "";
    document.getElementById("sampler").value = "euler";
  });
  const jobs = await page.evaluate(() => fetch("/v1/jobs").then((r) => r.json()));
  const i2i = jobs.data.find((j) => j.params.img2img);
  if (!i2i) fail("no img2img job in GET /v1/jobs");
  else {
    await page.evaluate(async (u) => {
      const blob = await fetch(u).then((r) => r.blob());
      const dt = new DataTransfer();
      dt.items.add(new File([blob], "dropped.png", { type: "image/png" }));
      document.body.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
    }, i2i.data[0].url);
    await page.waitForFunction(() => document.getElementById("prompt").value !== "", null, { timeout: 5000 }).catch(() => {});
    const dropped = await page.evaluate(() => ({ prompt: document.getElementById("prompt").value, seed: document.getElementById("seed").value,
                                                 steps: document.getElementById("steps").value, w: document.getElementById("width").value,
                                                 h: document.getElementById("height").value, sampler: document.getElementById("sampler").value,
                                                 message: document.getElementById("message").textContent }));
    if (!dropped.prompt.includes("red fox") || dropped.seed !== "42" || dropped.steps !== "6" || dropped.w !== String(w) ||
        dropped.h !== String(h) || dropped.sampler !== "dpmpp_2m" || !dropped.message.includes("dropped.png"))
      fail(`PNG drop: ${JSON.stringify(dropped)}`);
  }
  if ((await page.$eval("#queue", (e) => e.textContent)) !== "idle") fail("header not idle at the end");
  if (errors.length) fail(`page errors: ${errors.join("; ")}`);

  await page.screenshot({ path: shot, fullPage: true });
  console.log(`browser test: progress values ${JSON.stringify(seen)}; ${previews} preview frames; image ${img.w}x${img.h}; screenshot ${shot}`);
} finally {
  await browser.close();
}
