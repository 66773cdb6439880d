"""`ernie-image serve`'s AUTOMATIC1111 web API over a real socket, on the tiny model (CPU), with the request
sequences Open WebUI and SillyTavern send (their field names; the bodies are written here): the GET lists and
options, txt2img (one image and a batch), img2img and inpainting, png-info of a returned PNG, progress and
interrupt, OPTIONS, HTTP Basic and Bearer auth, bad bodies (422 naming the field), and pixel equality with the
OpenAI route and with `ernie-image generate` for the same settings.

usage: a1111_test.py ERNIE_IMAGE_BINARY TESTS_DATA_DIR"""
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
KEY = "a1111-test-key"
BASIC = {"Authorization": "Basic " + base64.b64encode(f"webui:{KEY}".encode()).decode()}
BEARER = {"Authorization": f"Bearer {KEY}"}
# Open WebUI's txt2img body (its automatic1111 client): prompt, batch_size, width, height, plus negative_prompt,
# steps, cfg_scale, seed, sampler_name and scheduler when set.
OPENWEBUI = {"prompt": "a red fox", "batch_size": 1, "width": 32, "height": 32, "negative_prompt": "blur",
             "steps": 2, "cfg_scale": 3.0, "seed": 77, "sampler_name": "Euler", "scheduler": "Automatic"}
# SillyTavern's `auto` source: more fields, most of which this engine ignores.
SILLYTAVERN = {"prompt": "a red fox", "negative_prompt": "blur", "sampler_name": "Euler", "scheduler": "Automatic",
               "steps": 2, "cfg_scale": 3.0, "width": 32, "height": 32, "restore_faces": False, "enable_hr": False,
               "hr_upscaler": "Latent", "hr_scale": 2.0, "hr_additional_modules": [], "denoising_strength": 0.7,
               "hr_second_pass_steps": 0, "seed": 77, "override_settings": {"CLIP_stop_at_last_layers": 1},
               "override_settings_restore_afterwards": True, "save_images": False, "send_images": True,
               "do_not_save_grid": False, "do_not_save_samples": False, "clip_skip": 1, "n_iter": 1,
               "batch_size": 1, "alwayson_scripts": {}}


def images_of(s, j, what, n=1):
    if not check(s == 200 and isinstance(j, dict) and len(j.get("images", [])) == n,
                 f"{what}: {s} {str(j)[:300]}"):
        return None
    return [base64.b64decode(i) for i in j["images"]]


def is_422(s, j, field, what):
    d = (j or {}).get("detail")
    ok = s == 422 and isinstance(d, list) and d and d[0].get("msg")
    if ok and field:
        ok = d[0].get("loc") == ["body", field]
    check(ok, f"{what}: {s} {j}")


def test_lists(srv):
    p = "/sdapi/v1/"
    s, j = srv.json("GET", p + "sd-models", headers=BASIC)
    check(s == 200 and len(j) == 1 and j[0]["title"] and j[0]["model_name"], f"sd-models: {s} {j}")
    model = j[0]["title"] if s == 200 else ""
    s, j = srv.json("GET", p + "samplers", headers=BASIC)
    check(s == 200 and [x["name"] for x in j] == ["Euler", "DPM++ 2M", "UniPC"], f"samplers: {s} {j}")
    s, j = srv.json("GET", p + "schedulers", headers=BASIC)
    check(s == 200 and j[0]["name"] == "automatic" and j[0]["label"] == "Automatic", f"schedulers: {s} {j}")
    for route in ("upscalers", "latent-upscale-modes", "sd-vae", "loras"):
        s, j = srv.json("GET", p + route, headers=BASIC)
        check(s == 200 and isinstance(j, list), f"{route}: {s} {j}")
    s, j = srv.json("GET", p + "options", headers=BASIC)
    check(s == 200 and j["sd_model_checkpoint"] == model, f"options: {s} {j}")
    # Open WebUI sets the model it lists; another name is refused, naming the field.
    s, j = srv.json("POST", p + "options", {"sd_model_checkpoint": model}, BASIC)
    check(s == 200 and j is None, f"POST options (same model): {s} {j}")
    s, j = srv.json("POST", p + "options", {"sd_model_checkpoint": "sd_xl_base_1.0"}, BASIC)
    is_422(s, j, "sd_model_checkpoint", "POST options (another model)")
    s, j = srv.json("GET", p + "progress", headers=BASIC)
    check(s == 200 and j["progress"] == 0 and j["state"]["job_count"] == 0, f"progress (idle): {s} {j}")
    # SillyTavern's sdcpp source probes with OPTIONS, without a key.
    for route in ("txt2img", "img2img"):
        s, h, _ = srv.request("OPTIONS", p + route)
        check(s in (200, 204) and "POST" in h.get("allow", ""), f"OPTIONS {route}: {s} {h}")
    return model


def test_auth(srv):
    s, h, _ = srv.request("GET", "/sdapi/v1/sd-models")
    check(s == 401 and "basic" in h.get("www-authenticate", "").lower(), f"no key: {s} {h}")
    bad = {"Authorization": "Basic " + base64.b64encode(b"webui:wrong").decode()}
    s, _, _ = srv.request("GET", "/sdapi/v1/sd-models", headers=bad)
    check(s == 401, f"wrong Basic password: {s}")
    s, _, _ = srv.request("GET", "/sdapi/v1/sd-models", headers=BEARER)
    check(s == 200, f"Bearer: {s}")
    s, j = srv.json("POST", "/sdapi/v1/txt2img", OPENWEBUI)
    check(s == 401, f"txt2img without a key: {s} {j}")


def test_txt2img(srv, binary, model_dir, model):
    s, j = srv.json("POST", "/sdapi/v1/txt2img", OPENWEBUI, BASIC)
    imgs = images_of(s, j, "Open WebUI txt2img")
    if not imgs:
        return None
    px = pixels(imgs[0])
    info = json.loads(j["info"])
    check(info["seed"] == 77 and info["all_seeds"] == [77] and info["sampler_name"] == "Euler" and
          info["steps"] == 2 and info["cfg_scale"] == 3.0 and info["width"] == 32 and info["sd_model_name"] == model,
          f"info: {info}")
    text = png_info(imgs[0])[2].get("parameters", "")
    check(info["infotexts"] == [text] and "Seed: 77" in text and "Steps: 2" in text, f"infotexts {info['infotexts']} vs PNG {text!r}")
    check(j["parameters"]["prompt"] == "a red fox" and j["parameters"]["seed"] == 77, f"parameters: {j['parameters']}")
    # SillyTavern's body, with its many ignored fields, gives the same image.
    s, j2 = srv.json("POST", "/sdapi/v1/txt2img", SILLYTAVERN, BASIC)
    imgs2 = images_of(s, j2, "SillyTavern txt2img")
    check(imgs2 is not None and pixels(imgs2[0]) == px, "SillyTavern's body gives another image")
    # The OpenAI route with the same settings: the same pixels.
    s, jo = srv.json("POST", "/v1/images/generations", {"prompt": "a red fox", "negative_prompt": "blur",
                                                         "size": "32x32", "steps": 2, "guidance_scale": 3.0,
                                                         "seed": 77, "sampler": "euler"}, BEARER)
    check(s == 200 and pixels(base64.b64decode(jo["data"][0]["b64_json"])) == px,
          f"the OpenAI route's image differs: {s}")
    # `ernie-image generate` with the same seed, steps, cfg and sampler.
    with tempfile.TemporaryDirectory() as d:
        cli = serverlib.cli_pixels(binary, model_dir, os.path.join(d, "cli.png"),
                                   ["-p", "a red fox", "-n", "blur", "-W", "32", "-H", "32", "--steps", "2",
                                    "--cfg", "3", "--seed", "77", "--sampler", "euler"], check)
        check(cli == px, "the A1111 image differs from `ernie-image generate` with the same settings")
    # png-info of the returned PNG.
    s, jp = srv.json("POST", "/sdapi/v1/png-info", {"image": "data:image/png;base64," + j["images"][0]}, BASIC)
    check(s == 200 and jp["info"] == text and jp["parameters"].get("Seed") == "77" and
          jp["parameters"].get("Prompt") == "a red fox" and jp["parameters"].get("Size-1") == "32" and
          "ernie-image" in jp["items"], f"png-info: {s} {jp}")
    # A batch: batch_size x n_iter images; seed -1 draws one.
    s, jb = srv.json("POST", "/sdapi/v1/txt2img", {**OPENWEBUI, "seed": -1, "batch_size": 2, "n_iter": 2}, BASIC)
    b = images_of(s, jb, "batch of 2 x 2", 4)
    if b:
        ib = json.loads(jb["info"])
        check(len(ib["all_seeds"]) == 4 and ib["seed"] >= 0 and ib["batch_size"] == 2 and len(ib["infotexts"]) == 4,
              f"batch info: {ib}")
    # Another sampler: other pixels.
    s, jd = srv.json("POST", "/sdapi/v1/txt2img", {**OPENWEBUI, "sampler_name": "DPM++ 2M"}, BASIC)
    d2 = images_of(s, jd, "DPM++ 2M")
    check(d2 is not None and pixels(d2[0]) != px and json.loads(jd["info"])["sampler_name"] == "DPM++ 2M",
          "DPM++ 2M gives the Euler image")
    return px


def test_img2img(srv, binary, model_dir, data):
    image = open(os.path.join(data, "img2img", "case0_input.png"), "rb").read()  # 24 x 32
    b64 = base64.b64encode(image).decode()
    body = {"prompt": "a cat", "init_images": [b64], "denoising_strength": 0.6, "steps": 4, "cfg_scale": 3.0,
            "seed": 5, "width": 24, "height": 32, "sampler_name": "Euler"}
    s, j = srv.json("POST", "/sdapi/v1/img2img", body, BASIC)
    imgs = images_of(s, j, "img2img")
    if imgs:
        info = json.loads(j["info"])
        check(info["denoising_strength"] == 0.6 and j["parameters"]["init_images"] is None, f"img2img info: {info}")
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "in.png")
            open(src, "wb").write(image)
            cli = serverlib.cli_pixels(binary, model_dir, os.path.join(d, "cli.png"),
                                       ["-p", "a cat", "-W", "24", "-H", "32", "--steps", "4", "--cfg", "3",
                                        "--seed", "5", "-i", src, "--strength", "0.6"], check)
            check(cli == pixels(imgs[0]), "img2img differs from `generate -i --strength`")
    # Inpainting: A1111 pastes the unmasked pixels back (our composite), as `generate --mask --composite`.
    d3 = os.path.join(data, "img2img")
    i3, m3 = (base64.b64encode(open(os.path.join(d3, f), "rb").read()).decode() for f in ("case3_input.png", "case3_mask.png"))
    s, j = srv.json("POST", "/sdapi/v1/img2img", {**body, "init_images": [i3], "mask": m3, "width": 32, "height": 32,
                                                  "denoising_strength": 1.0}, BASIC)
    inp = images_of(s, j, "inpainting")
    if inp:
        with tempfile.TemporaryDirectory() as d:
            cli = serverlib.cli_pixels(binary, model_dir, os.path.join(d, "cli.png"),
                                       ["-p", "a cat", "-W", "32", "-H", "32", "--steps", "4", "--cfg", "3",
                                        "--seed", "5", "-i", os.path.join(d3, "case3_input.png"),
                                        "--mask", os.path.join(d3, "case3_mask.png"), "--strength", "1",
                                        "--composite"], check)
            check(cli == pixels(inp[0]), "inpainting differs from `generate -i --mask --composite`")
    s, j = srv.json("POST", "/sdapi/v1/img2img", {"prompt": "a cat"}, BASIC)
    is_422(s, j, "init_images", "img2img without init_images")
    s, j = srv.json("POST", "/sdapi/v1/img2img", {**body, "init_images": ["bm90IGFuIGltYWdl"]}, BASIC)
    is_422(s, j, "init_images", "img2img with bytes that are no image")


def test_bad_bodies(srv):
    t = "/sdapi/v1/txt2img"
    for bad, field in (({"steps": "two"}, "steps"), ({"width": 100000}, "width"), ({"cfg_scale": "high"}, "cfg_scale"),
                       ({"sampler_name": "Euler a"}, "sampler_name"), ({"scheduler": "Karras"}, "scheduler"),
                       ({"enable_hr": True}, "enable_hr"), ({"seed": "x"}, "seed"), ({"batch_size": 0}, "batch_size"),
                       ({"width": 33}, "width")):
        s, j = srv.json("POST", t, {**OPENWEBUI, **bad}, BASIC)
        is_422(s, j, field, f"txt2img {bad}")
    s, j = srv.json("POST", t, {**OPENWEBUI, "sampler_name": "LMS"}, BASIC)
    check(s == 422 and "Euler, DPM++ 2M, UniPC" in j["detail"][0]["msg"], f"unknown sampler lists the names: {j}")
    s, _, b = srv.request("POST", t, "{not json", {**BASIC, "Content-Type": "application/json"})
    check(s == 422 and b"JSON" in b, f"malformed JSON: {s} {b[:200]}")
    s, j = srv.json("POST", "/sdapi/v1/png-info", {"image": "aGVsbG8="}, BASIC)
    is_422(s, j, "image", "png-info of bytes that are no image")
    # The server goes on.
    s, j = srv.json("GET", "/sdapi/v1/progress", headers=BASIC)
    check(s == 200, f"progress after bad bodies: {s}")


def test_interrupt(srv):
    out = {}

    def run():
        out["r"] = srv.json("POST", "/sdapi/v1/txt2img", {**OPENWEBUI, "steps": 1000, "width": 128, "height": 128}, BASIC, timeout=600)

    t = threading.Thread(target=run)
    t.start()
    end, seen = time.time() + 60, None
    while time.time() < end:
        s, j = srv.json("GET", "/sdapi/v1/progress", headers=BASIC)
        if s == 200 and j["state"]["sampling_step"] >= 1:
            seen = j
            break
        time.sleep(0.02)
    check(seen is not None and 0 < seen["progress"] < 1 and seen["state"]["sampling_steps"] == 1000 and
          seen["state"]["job_count"] >= 1, f"progress while running: {seen}")
    t0 = time.time()
    s, j = srv.json("POST", "/sdapi/v1/interrupt", {}, BASIC)
    check(s == 200, f"interrupt: {s} {j}")
    t.join(120)
    s, j = out.get("r", (None, None))
    check(s is not None and s != 200 and time.time() - t0 < 60, f"the interrupted txt2img: {s} {j}")
    s, j = srv.json("POST", "/sdapi/v1/skip", {}, BASIC)  # nothing running: a no-op
    check(s == 200, f"skip when idle: {s}")
    srv.wait_idle()
    s, j = srv.json("GET", "/sdapi/v1/progress", headers=BASIC)
    check(s == 200 and j["state"]["job_count"] == 0, f"progress after interrupt: {j}")


def main():
    binary, data = sys.argv[1], sys.argv[2]
    model_dir = os.path.join(data, "tiny-ernie-image", "model")
    srv = Server(binary, model_dir, "--api-key", KEY)
    ok = False
    try:
        test_auth(srv)
        model = test_lists(srv)
        test_txt2img(srv, binary, model_dir, model)
        test_img2img(srv, binary, model_dir, data)
        test_bad_bodies(srv)
        test_interrupt(srv)
        ok = not check.failures
    finally:
        srv.close(show_log=not ok)
    check.done("a1111_test")


if __name__ == "__main__":
    main()
