"""`ernie-image serve --offload text-encoder` over a real socket, tiny model, CPU: /health and /v1/info
report the mode, each request loads the text encoder again (a `load` phase in its events; none when
resident), and the images are the resident server's, pixel for pixel.

usage: offload_test.py ERNIE_IMAGE_BINARY TESTS_DATA_DIR"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Check, Server, pixels  # noqa: E402

check = Check()


def run_job(srv, body):
    """Submits a job, reads its events to the end; returns (phases seen, PNG pixels or None)."""
    s, j = srv.json("POST", "/v1/jobs", body)
    if not check(s == 202, f"POST /v1/jobs -> {s} {j}"):
        return set(), None
    evs = srv.events(j["id"])
    check(evs and evs[-1][1] == "done", f"job events end with {evs[-1] if evs else None}")
    phases = {e[2]["phase"] for e in evs if e[1] == "progress"}
    s, h, png = srv.request("GET", f"/v1/jobs/{j['id']}/images/0")
    return phases, pixels(png) if check(s == 200, f"GET image -> {s}") else None


def serve_and_generate(binary, model, mode, bodies, *extra):
    """Starts a server, checks what it reports, runs the jobs one after another; returns their pixels."""
    srv = Server(binary, model, *extra)
    out = []
    try:
        s, j = srv.json("GET", "/health")
        check(s == 200 and j.get("offload") == mode, f"{mode}: GET /health -> {s} {j}")
        s, info = srv.json("GET", "/v1/info")
        mem = info.get("memory", {})
        check(s == 200 and mem.get("offload") == mode and mem.get("vae_tiling") == "auto",
              f"{mode}: /v1/info memory {mem}")
        check(mem.get("max_vram_gib") is None and mem.get("estimated_peak_gib") is None,
              f"{mode}: no cap and no estimate on the CPU: {mem}")
        check(info.get("max_batch_images", 0) > 1, f"{mode}: batching stays on without a cap: {info}")
        for i, body in enumerate(bodies):
            phases, px = run_job(srv, body)
            check("denoise" in phases, f"{mode}: job {i} phases {phases}")
            # Offloaded: the text encoder is loaded for each request (and the DiT with the first).
            check(("load" in phases) == (mode == "text-encoder"), f"{mode}: job {i} phases {phases}")
            out.append(px)
        rc = srv.terminate(60)
        check(rc == 0, f"{mode}: exit code {rc}, want 0")
    finally:
        srv.close(show_log=bool(check.failures))
    return out


def main():
    binary, data = sys.argv[1], sys.argv[2]
    model = os.path.join(data, "tiny-ernie-image", "model")
    t0 = time.time()
    bodies = [{"prompt": "a red fox in snow", "negative_prompt": "blurry", "size": "32x32", "steps": 2, "seed": 7,
               "guidance_scale": 3.0},
              {"prompt": "a lighthouse", "size": "32x32", "steps": 2, "seed": 8}]
    resident = serve_and_generate(binary, model, "none", bodies)
    offloaded = serve_and_generate(binary, model, "text-encoder", bodies, "--offload", "text-encoder")
    check(len(resident) == len(offloaded) == 2 and None not in resident, "every job gave an image")
    for i, (a, b) in enumerate(zip(resident, offloaded)):
        check(a == b, f"job {i}: the offloaded server's image differs from the resident one")
    check(resident[0] != resident[1], "two different requests gave the same image")
    print(f"took {time.time() - t0:.1f} s")
    check.done("server offload test")


if __name__ == "__main__":
    main()
