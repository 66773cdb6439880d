"""`ernie-image serve --lora-dir` over a real socket, on the tiny model (CPU): GET /v1/loras lists the folder;
a request with a LoRA, then one without, then the LoRA again give the CLI's images pixel for pixel (each set
starts from the exact base weights); a concurrent mix of LoRA, tagged and plain jobs leaks no adapter into the
wrong image; bad names, scales and tags are 400s naming `loras` or the prompt, and the server goes on.

usage: lora_test.py ERNIE_IMAGE_BINARY TESTS_DATA_DIR"""
import base64
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serverlib  # noqa: E402
from serverlib import Check, Server, pixels, png_info  # noqa: E402

check = Check()
SIZE = (16, 24)
BASE = {"prompt": "a cat", "size": f"{SIZE[0]}x{SIZE[1]}", "steps": 2, "seed": 5, "guidance_scale": 3.0,
        "response_format": "b64_json"}


def cli_pixels(binary, model, out_dir, name, extra, prompt=BASE["prompt"]):
    return serverlib.cli_pixels(binary, model, os.path.join(out_dir, name + ".png"),
                                ["--prompt", prompt, "-W", str(SIZE[0]), "-H", str(SIZE[1]), "--steps", "2",
                                 "--seed", "5", "--cfg", "3", *extra], check)


def generate(srv, body):
    s, j = srv.json("POST", "/v1/images/generations", body)
    if not check(s == 200, f"generation {body} -> {s} {j}"):
        return None, None
    png = base64.b64decode(j["data"][0]["b64_json"])
    return pixels(png), png_info(png)[2]


def is_400(srv, body, param, needle, what):
    s, j = srv.json("POST", "/v1/images/generations", body)
    e = (j or {}).get("error", {})
    check(s == 400 and (param is None or e.get("param") == param) and needle in e.get("message", ""),
          f"{what}: {s} {j}")


def main():
    binary, data = sys.argv[1], sys.argv[2]
    model = os.path.join(data, "tiny-ernie-image", "model")
    lora_dir = os.path.join(data, "samplers-lora", "lora")
    lora_file = os.path.join(lora_dir, "tiny_lora.safetensors")
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        want_lora = cli_pixels(binary, model, tmp, "lora", ["--lora", lora_file + ":0.8"])
        want_plain = cli_pixels(binary, model, tmp, "plain", [])
        # The CLI's prompt tag is its --lora flag.
        tagged = cli_pixels(binary, model, tmp, "tag", ["--lora-dir", lora_dir], "a cat <lora:tiny_lora:0.8>")
        check(tagged == want_lora, "CLI: the prompt tag and --lora give different images")
        check(want_lora != want_plain, "CLI: the LoRA did not change the image")

    srv = Server(binary, model, "--lora-dir", lora_dir)
    try:
        s, j = srv.json("GET", "/v1/loras")
        check(s == 200 and j.get("object") == "list" and
              [d["name"] for d in j.get("data", [])] == ["tiny_lora"] and j["data"][0]["bytes"] > 0 and
              j["data"][0]["tag"] == "<lora:tiny_lora:1>", f"GET /v1/loras -> {s} {j}")

        lora_body = {**BASE, "loras": [{"name": "tiny_lora", "scale": 0.8}]}
        tag_body = {**BASE, "prompt": "a cat <lora:tiny_lora:0.8>"}
        seq = [("lora", lora_body, want_lora), ("plain", BASE, want_plain), ("lora again", lora_body, want_lora),
               ("tag", tag_body, want_lora), ("plain again", BASE, want_plain)]
        for what, body, want in seq:
            px, text = generate(srv, body)
            check(px is not None and px == want, f"server {what}: differs from the CLI's image")
            params = (text or {}).get("parameters", "")
            if body is not BASE:
                check('Lora hashes: "tiny_lora: f9267c2ae757"' in params, f"server {what}: parameters {params!r}")
                meta = json.loads((text or {}).get("ernie-image", "{}"))
                l = (meta.get("loras") or [{}])[0]
                check(l.get("hash") == "f9267c2ae757" and abs(l.get("scale", 0) - 0.8) < 1e-6,
                      f"server {what}: JSON chunk loras {meta.get('loras')}")
            else:
                check("Lora hashes" not in params, f"server {what}: a plain image names a LoRA: {params!r}")
        px, text = generate(srv, tag_body)
        check("a cat <lora:tiny_lora:0.8>" in (text or {}).get("parameters", ""), "the PNG's prompt keeps its tag")

        # A concurrent mix: every job's image is its own set's.
        jobs = []
        for i in range(8):
            body = [lora_body, BASE, tag_body, BASE][i % 4]
            s, j = srv.json("POST", "/v1/jobs", {k: v for k, v in body.items() if k != "response_format"})
            check(s == 202, f"POST /v1/jobs -> {s} {j}")
            jobs.append((j.get("id"), want_plain if body is BASE else want_lora))
        for i, (job, want) in enumerate(jobs):
            evs = srv.events(job)
            check(evs and evs[-1][1] == "done", f"mix job {i}: ended with {evs[-1] if evs else None}")
            t = evs[-1][2].get("timings", {}) if evs else {}
            check("lora_switch_s" in t and t["lora_switch_s"] >= 0, f"mix job {i}: timings {t}")
            s, h, png = srv.request("GET", f"/v1/jobs/{job}/images/0")
            check(s == 200 and pixels(png) == want, f"mix job {i}: the wrong adapter set's image")
        m = srv.metrics()
        check(m.get("ernie_lora_switch_seconds_count", 0) >= 2, "/metrics counts the LoRA switches")

        # Bad input: 400s, and the server goes on.
        is_400(srv, {**BASE, "loras": [{"name": "nosuch"}]}, "loras", "tiny_lora", "unknown name lists the folder")
        is_400(srv, {**BASE, "loras": [{"name": "../lora/tiny_lora"}]}, "loras", "", "a path as a name")
        is_400(srv, {**BASE, "loras": [{"name": "tiny_lora", "scale": 1e9}]}, "loras", "", "absurd scale")
        is_400(srv, {**BASE, "loras": [{"name": "tiny_lora", "weight": 1}]}, "loras", "", "unknown field")
        is_400(srv, {**BASE, "loras": "tiny_lora"}, "loras", "", "not a list")
        is_400(srv, {**BASE, "loras": [{"name": "tiny_lora"}] * 17}, "loras", "", "too many")
        is_400(srv, {**BASE, "prompt": "a cat <lora:nosuch:1>"}, None, "nosuch", "unknown tag")
        is_400(srv, {**BASE, "prompt": "a cat <lora:tiny_lora"}, None, "not closed", "unclosed tag")
        is_400(srv, {**BASE, "negative_prompt": "<lora:tiny_lora:1>"}, None, "negative prompt", "tag in the negative")
        px, _ = generate(srv, lora_body)
        check(px == want_lora, "after the errors: the LoRA image")
        rc = srv.terminate(60)
        check(rc == 0, f"exit code {rc}, want 0")
    finally:
        srv.close(show_log=bool(check.failures))
    print(f"took {time.time() - t0:.1f} s")
    check.done("server LoRA test")


if __name__ == "__main__":
    main()
