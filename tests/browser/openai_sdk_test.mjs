// The official OpenAI SDK (npm `openai`) against `ernie-image serve`: images.edit with an image, with an
// image and a mask, and images.generate, as a client would call them; the edit's PNG equals the server's
// answer to the same request in JSON (image in base64), response_format "url" gives a /v1/files/ URL that
// serves the PNG more than once, and a bad image is the SDK's BadRequestError (400) naming `image`.
// usage: node openai_sdk_test.mjs URL API_KEY TESTS_DATA_DIR
import fs from "node:fs";
import path from "node:path";
import OpenAI, { toFile } from "openai";

const [url, key, data] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url + "/v1", apiKey: key, maxRetries: 0, timeout: 300000 });
const dir = path.join(data, "img2img");
const png = (name) => fs.readFileSync(path.join(dir, name));
let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? "ok" : "FAIL"}: ${what}`);
  if (!ok) failures++;
};
const pngSize = (b64) => {
  const b = Buffer.from(b64, "base64");
  return [b.readUInt32BE(16), b.readUInt32BE(20)];
};
// Our fields ride along: the SDK sends every key of the params as a form field.
const ours = { steps: 3, seed: 5, guidance_scale: 3 };

const edit = await client.images.edit({
  model: "ernie-image", image: await toFile(png("case0_input.png"), "in.png", { type: "image/png" }),
  prompt: "a cat", n: 1, size: "24x32", response_format: "b64_json", strength: 0.6, ...ours,
});
check(edit.data.length === 1 && JSON.stringify(pngSize(edit.data[0].b64_json)) === "[24,32]", "images.edit: one 24x32 PNG");
const json = await fetch(url + "/v1/images/generations", {
  method: "POST", headers: { "Content-Type": "application/json", Authorization: `Bearer ${key}` },
  body: JSON.stringify({ prompt: "a cat", n: 1, size: "24x32", response_format: "b64_json", strength: 0.6,
                         image: png("case0_input.png").toString("base64"), ...ours }),
}).then((r) => r.json());
check(json.data && json.data[0].b64_json === edit.data[0].b64_json, "images.edit equals the JSON request's PNG");

const inpaint = await client.images.edit({
  image: await toFile(png("case3_input.png"), "in.png", { type: "image/png" }),
  mask: await toFile(png("case3_mask.png"), "mask.png", { type: "image/png" }),
  prompt: "a red ball", size: "32x32", response_format: "b64_json", ...ours,
});
check(JSON.stringify(pngSize(inpaint.data[0].b64_json)) === "[32,32]", "images.edit with a mask: a 32x32 PNG");

const gen = await client.images.generate({ prompt: "a cat", size: "16x16", response_format: "b64_json", ...ours });
check(JSON.stringify(pngSize(gen.data[0].b64_json)) === "[16,16]", "images.generate: a 16x16 PNG");

// response_format "url": the SDK's data[0].url is served (with the key) until the history evicts it, twice alike.
const byUrl = await client.images.generate({ prompt: "a cat", size: "16x16", response_format: "url", ...ours });
const u = byUrl.data[0].url || "";
const get = () => fetch(u, { headers: { Authorization: `Bearer ${key}` } }).then(async (r) => [r.status, Buffer.from(await r.arrayBuffer())]);
const [s1, b1] = await get(), [s2, b2] = await get();
check(u.startsWith(url + "/v1/files/") && s1 === 200 && s2 === 200 && b1.equals(b2) &&
      JSON.stringify(pngSize(b1.toString("base64"))) === "[16,16]" && byUrl.data[0].seed === ours.seed,
      `images.generate with response_format url: ${u} -> ${s1}, ${s2}`);

try {
  await client.images.edit({ image: await toFile(Buffer.from("GIF89a, not a PNG"), "x.gif", { type: "image/gif" }),
                             prompt: "x", size: "24x32" });
  check(false, "a GIF is refused");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.error?.param === "image",
        `a GIF is a 400 naming image (${e.status} ${JSON.stringify(e.error)})`);
}
try {
  await new OpenAI({ baseURL: url + "/v1", apiKey: "wrong", maxRetries: 0 }).images.edit({
    image: await toFile(png("case0_input.png"), "in.png", { type: "image/png" }), prompt: "x" });
  check(false, "a wrong key is refused");
} catch (e) {
  check(e instanceof OpenAI.AuthenticationError && e.status === 401, `a wrong key is a 401 (${e.status})`);
}
console.log(failures ? `openai sdk test: ${failures} failed` : "openai sdk test: all passed");
process.exit(failures ? 1 : 0);
