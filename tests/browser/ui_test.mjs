// Browser test of the `ernie-image serve` web page in headless Debian Chromium (playwright-core):
// types a prompt, clicks Generate, watches the progress bar move, waits for the image, checks it and
// its download link; then an img2img run (an init image, another sampler); saves a screenshot.
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
  await page.waitForSelector("#size option", { state: "attached", timeout: 30000 });
  const sizes = await page.$$eval("#size option", (os) => os.map((o) => o.value));
  const size = sizes.sort((a, b) => a.split("x").reduce((p, v) => p * v, 1) - b.split("x").reduce((p, v) => p * v, 1))[0];
  await page.selectOption("#size", size);
  await page.fill("#prompt", "a red fox sitting in fresh snow, watercolor");
  await page.fill("#negative", "blurry");
  await page.fill("#steps", "6");
  await page.fill("#guidance", "1");  // no second (negative) row: half the work on the CPU
  await page.fill("#seed", "42");

  // Record every value the progress bar takes.
  await page.evaluate(() => {
    window.__progress = [];
    new MutationObserver((ms) => {
      for (const m of ms) window.__progress.push(Number(m.target.getAttribute("aria-valuenow")));
    }).observe(document.getElementById("gallery"), { subtree: true, attributes: true, attributeFilter: ["aria-valuenow"] });
  });
  await page.click("#generate");
  await page.waitForSelector('.card.done img[src^="blob:"]', { timeout: 120000 });

  const seen = await page.evaluate(() => window.__progress);
  const between = seen.filter((v) => v > 0 && v < 100);
  if (between.length < 2) fail(`the progress bar did not move through intermediate values: ${JSON.stringify(seen)}`);
  for (let i = 1; i < seen.length; ++i) if (seen[i] < seen[i - 1]) fail(`progress went backwards: ${JSON.stringify(seen)}`);
  if (seen[seen.length - 1] !== 100) fail(`progress ended at ${seen[seen.length - 1]}`);

  const img = await page.$eval(".card.done img", (i) => ({ w: i.naturalWidth, h: i.naturalHeight, complete: i.complete }));
  const [w, h] = size.split("x").map(Number);
  if (!img.complete || img.w !== w || img.h !== h) fail(`image is ${img.w}x${img.h}, want ${size}`);
  const link = await page.$eval(".card.done a.download", (a) => ({ href: a.href, download: a.download, hidden: a.classList.contains("hidden") }));
  if (!link.href.startsWith("blob:") || link.download !== "ernie-image-42.png" || link.hidden) fail(`download link ${JSON.stringify(link)}`);
  const params = await page.$eval(".card.done .params", (p) => p.textContent);
  if (!params.includes("6 steps") || !params.includes("seed 42") || !params.includes(size)) fail(`parameters shown: ${params}`);
  const prompt = await page.$eval(".card.done .prompt", (p) => p.textContent);
  if (!prompt.includes("red fox")) fail(`prompt shown: ${prompt}`);
  if (errors.length) fail(`page errors: ${errors.join("; ")}`);

  // img2img from the page: an init image, the DPM++ 2M sampler; the card names both.
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
  const img2 = await page.$eval(".card.done img", (i) => [i.naturalWidth, i.naturalHeight]);
  if (img2[0] !== w || img2[1] !== h) fail(`img2img image is ${img2}, want ${size} (the init image resized)`);

  await page.screenshot({ path: shot, fullPage: true });
  console.log(`browser test: progress values ${JSON.stringify(seen)}; image ${img.w}x${img.h}; screenshot ${shot}`);
} finally {
  await browser.close();
}
