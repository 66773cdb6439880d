"""`ernie-image serve` img2img and inpainting over a real socket, on the tiny model (CPU): the JSON field `image`
(base64 PNG) on /v1/images/generations and /v1/jobs, and OpenAI's multipart POST /v1/images/edits with `image`
and `mask`, give the CLI's `generate -i/--mask` images pixel for pixel; img2img and text-to-image jobs at once
stay apart; bad images and masks (not a PNG, truncated, a 100 MP header, the wrong size, no image) are 400s
naming their field, and the server goes on.

usage: img2img_test.py ERNIE_IMAGE_BINARY TESTS_DATA_DIR"""
import base64
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serverlib  # noqa: E402
from serverlib import Check, Server, pixels, png_info  # noqa: E402

check = Check()
W, H = 24, 32  # case0_input.png
BASE = {"prompt": "a cat", "size": f"{W}x{H}", "steps": 4, "seed": 5, "guidance_scale": 3.0}


def cli_pixels(binary, model, out_dir, name, extra, size=(W, H)):
    return serverlib.cli_pixels(binary, model, os.path.join(out_dir, name + ".png"),
                                ["--prompt", BASE["prompt"], "-W", str(size[0]), "-H", str(size[1]), "--steps", "4",
                                 "--seed", "5", "--cfg", "3", *extra], check)


def multipart(fields, files):
    """A multipart/form-data body as HTTP clients send it: (body bytes, Content-Type)."""
    b = "ernieFormBoundary7MA4YWxkTrZu0gW"
    out = b""
    for k, v in fields.items():
        out += f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
    for k, (name, data) in files.items():
        out += (f'--{b}\r\nContent-Disposition: form-data; name="{k}"; filename="{name}"\r\n'
                f"Content-Type: image/png\r\n\r\n").encode() + data + b"\r\n"
    return out + f"--{b}--\r\n".encode(), f"multipart/form-data; boundary={b}"


def first_image(s, j, what):
    if not check(s == 200 and j and j.get("data"), f"{what}: {s} {str(j)[:300]}"):
        return None, {}
    png = base64.b64decode(j["data"][0]["b64_json"])
    return pixels(png), png_info(png)[2]


def is_400(s, j, param, needle, what):
    e = (j or {}).get("error", {})
    check(s == 400 and (param is None or e.get("param") == param) and needle in e.get("message", ""),
          f"{what}: {s} {j}")


def main():
    binary, data = sys.argv[1], sys.argv[2]
    model = os.path.join(data, "tiny-ernie-image", "model")
    d = os.path.join(data, "img2img")
    image_file = os.path.join(d, "case0_input.png")
    image = open(image_file, "rb").read()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        mask32 = os.path.join(d, "case3_mask.png")  # 32x32
        want_i2i = cli_pixels(binary, model, tmp, "i2i", ["-i", image_file, "--strength", "0.6"])
        want_t2i = cli_pixels(binary, model, tmp, "t2i", [])
        # inpainting: the 32x32 pair of case 3
        want_inpaint = cli_pixels(binary, model, tmp, "inpaint",
                                  ["-i", os.path.join(d, "case3_input.png"), "--mask", mask32], (32, 32))
        check(want_i2i != want_t2i, "CLI: the init image did not change the result")

    srv = Server(binary, model)
    try:
        b64 = base64.b64encode(image).decode()
        # JSON on /v1/images/generations, and a data URL
        px, text = first_image(*srv.json("POST", "/v1/images/generations", {**BASE, "image": b64, "strength": 0.6}),
                               "generations with image")
        check(px is not None and px == want_i2i, "generations + image: differs from the CLI's -i image")
        check("Denoising strength: 0.6" in text.get("parameters", ""), f"parameters {text.get('parameters')!r}")
        px, _ = first_image(*srv.json("POST", "/v1/images/generations",
                                      {**BASE, "image": "data:image/png;base64," + b64, "strength": 0.6}), "data URL")
        check(px == want_i2i, "a data URL differs from plain base64")

        # OpenAI's edits, multipart: image, prompt, n, size, response_format as the SDK sends them
        fields = {"prompt": BASE["prompt"], "n": "1", "size": BASE["size"], "response_format": "b64_json",
                  "model": "ernie-image", "steps": "4", "seed": "5", "guidance_scale": "3", "strength": "0.6"}
        body, ct = multipart(fields, {"image": ("in.png", image)})
        px, _ = first_image(*srv.json("POST", "/v1/images/edits", body, {"Content-Type": ct}), "edits multipart")
        check(px == want_i2i, "edits (multipart): differs from the CLI's -i image")
        body, ct = multipart(fields, {"image[]": ("in.png", image)})
        px, _ = first_image(*srv.json("POST", "/v1/images/edits", body, {"Content-Type": ct}), "edits image[]")
        check(px == want_i2i, "edits (image[]): differs from the CLI's -i image")
        # inpainting through edits, with the mask
        f2 = {**fields, "size": "32x32"}
        del f2["strength"]
        body, ct = multipart(f2, {"image": ("in.png", open(os.path.join(d, "case3_input.png"), "rb").read()),
                                  "mask": ("mask.png", open(mask32, "rb").read())})
        px, text = first_image(*srv.json("POST", "/v1/images/edits", body, {"Content-Type": ct}), "edits with mask")
        check(px == want_inpaint, "edits + mask: differs from the CLI's --mask image")
        check("Inpaint: true" in text.get("parameters", ""), f"inpaint parameters {text.get('parameters')!r}")
        # JSON on edits
        px, _ = first_image(*srv.json("POST", "/v1/images/edits", {**BASE, "image": b64, "strength": 0.6}), "edits JSON")
        check(px == want_i2i, "edits (JSON): differs")

        # img2img and text-to-image jobs at once: each gets its own image
        jobs = []
        for i in range(6):
            body = {**BASE, "image": b64, "strength": 0.6} if i % 2 == 0 else BASE
            s, j = srv.json("POST", "/v1/jobs", body)
            check(s == 202, f"POST /v1/jobs -> {s} {j}")
            jobs.append((j.get("id"), want_i2i if i % 2 == 0 else want_t2i))
        for i, (job, want) in enumerate(jobs):
            evs = srv.events(job)
            check(evs and evs[-1][1] == "done", f"mix job {i}: ended with {evs[-1] if evs else None}")
            s, h, png = srv.request("GET", f"/v1/jobs/{job}/images/0")
            check(s == 200 and pixels(png) == want, f"mix job {i}: the wrong image")

        # Bad input: 400s naming the field, and the server goes on.
        huge = bytearray(image)
        huge[16:24] = (10000).to_bytes(4, "big") * 2  # a 100 MP header
        bad = [
            ({**BASE, "image": base64.b64encode(b"GIF89a not a png").decode()}, "image", "PNG", "not a PNG"),
            ({**BASE, "image": base64.b64encode(image[:len(image) // 2]).decode()}, "image", "", "truncated"),
            ({**BASE, "image": base64.b64encode(bytes(huge)).decode()}, "image", "too large", "100 MP header"),
            ({**BASE, "image": "%%%"}, "image", "base64", "not base64"),
            ({**BASE, "image": b64, "size": "32x32"}, None, "differs from the requested", "wrong size"),
            ({**BASE, "image": b64, "mask": base64.b64encode(open(mask32, "rb").read()).decode()}, None,
             "differs from the init image", "mask of another size"),
            ({**BASE, "image": b64, "mask": "AAAA"}, "mask", "PNG", "mask not a PNG"),
            ({**BASE, "image": b64, "strength": 0}, "strength", "(0, 1]", "strength 0"),
            ({**BASE, "strength": 0.5}, None, "needs an init image", "strength without an image"),
        ]
        for body, param, needle, what in bad:
            is_400(*srv.json("POST", "/v1/images/generations", body), param, needle, what)
        is_400(*srv.json("POST", "/v1/images/edits", BASE), "image", "required", "edits without an image")
        body, ct = multipart(fields, {})
        is_400(*srv.json("POST", "/v1/images/edits", body, {"Content-Type": ct}), "image", "required",
               "multipart without an image")
        is_400(*srv.json("POST", "/v1/images/edits", b"--x\r\nbroken", {"Content-Type": "multipart/form-data; boundary=x"}),
               None, "multipart", "broken multipart")
        is_400(*srv.json("POST", "/v1/images/edits", b"x", {"Content-Type": "multipart/form-data"}), None,
               "boundary", "no boundary")
        px, _ = first_image(*srv.json("POST", "/v1/images/generations", {**BASE, "image": b64, "strength": 0.6}),
                            "after the errors")
        check(px == want_i2i, "after the errors: the img2img image")
        rc = srv.terminate(60)
        check(rc == 0, f"exit code {rc}, want 0")
    finally:
        srv.close(show_log=bool(check.failures))
    print(f"took {time.time() - t0:.1f} s")
    check.done("server img2img test")


if __name__ == "__main__":
    main()
