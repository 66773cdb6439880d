"""The `ernie-image serve` history over a real socket, on the tiny model (CPU): images fetched more than once,
eviction by count (--history) and by bytes (--history-mib) with a clear 410, GET /v1/jobs, OpenAI's
response_format "url" served from /v1/files/, the page's capabilities in /v1/info, and live `preview` events
(present with --preview fast while a stream listens, absent with --preview none).

usage: history_test.py ERNIE_IMAGE_BINARY TESTS_DATA_DIR"""
import base64
import os
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Check, Server, png_info  # noqa: E402

check = Check()


def gen(srv, body):
    s, j = srv.json("POST", "/v1/images/generations", body)
    assert s == 200, (s, j)
    return j


def is_gone(srv, path, what):
    s, j = srv.json("GET", path)
    ok = check(s == 410 and j.get("error", {}).get("code") == "gone", f"{what}: {path} -> {s} {str(j)[:200]}")
    if ok:
        msg = j["error"]["message"]
        check("evicted from the history" in msg and "--history" in msg, f"{what}: 410 message not clear: {msg}")


def preview_events(srv, size, steps):
    """Runs a job while listening to its events; returns (events, job id)."""
    s, j = srv.json("POST", "/v1/jobs", {"prompt": "a preview", "size": size, "steps": steps, "seed": 3})
    assert s == 202, (s, j)
    return srv.events(j["id"], timeout=300), j["id"]


def test_url_and_history(binary, model):
    srv = Server(binary, model, "--history", "3")
    try:
        s, info = srv.json("GET", "/v1/info")
        sf = info["scale_factor"]
        w, h = 8 * sf, 6 * sf
        size = f"{w}x{h}"
        check(s == 200 and info.get("preview") == "fast" and info.get("history", {}).get("max_jobs") == 3 and
              info.get("samplers") == ["euler", "dpmpp_2m", "unipc"] and info.get("prompt_enhancer") is True and
              info.get("loras") is False,
              f"/v1/info capabilities: {info}")
        body = {"prompt": "a lighthouse", "size": size, "steps": 2}

        # response_format url: an absolute URL under /v1/files/, fetchable more than once; seed and prompt kept.
        j = gen(srv, {**body, "seed": 11, "n": 2, "response_format": "url"})
        d = j["data"]
        check(len(d) == 2 and all("url" in x and "b64_json" not in x for x in d), f"url response: {j}")
        u = urllib.parse.urlparse(d[0]["url"])
        check(u.scheme == "http" and u.netloc == f"127.0.0.1:{srv.port}" and u.path == f"/v1/files/{j['id']}-0.png",
              f"data[0].url {d[0]['url']}")
        check([x.get("seed") for x in d] == [11, 11] and all(x.get("revised_prompt") == "a lighthouse" for x in d),
              f"data[] seeds and revised prompts: {d}")
        first = []
        for k in range(2):
            s, hd, png = srv.request("GET", urllib.parse.urlparse(d[1]["url"]).path)
            check(s == 200 and hd["content-type"] == "image/png" and png_info(png)[:2] == (w, h),
                  f"fetch {k + 1} of {d[1]['url']} -> {s}")
            first.append(png)
        check(first[0] == first[1], "the second fetch gave other bytes")
        # The default stays b64_json (backward compatible; gpt-image-1 answers b64_json too).
        jb = gen(srv, {**body, "seed": 12})
        check("b64_json" in jb["data"][0] and "url" not in jb["data"][0], f"default response_format: {list(jb['data'][0])}")
        png_b = base64.b64decode(jb["data"][0]["b64_json"])
        s, _, again = srv.request("GET", f"/v1/jobs/{jb['id']}/images/0")
        check(s == 200 and again == png_b, "a b64_json generation's image is in the history too")

        # GET /v1/jobs: newest first, with each image's URL and seed.
        s, lst = srv.json("GET", "/v1/jobs")
        ids = [x["id"] for x in lst["data"]]
        check(s == 200 and ids[:2] == [jb["id"], j["id"]], f"GET /v1/jobs order: {ids}")
        top = lst["data"][1]
        check(top["status"] == "succeeded" and [x["url"] for x in top["data"]] == [f"/v1/files/{j['id']}-0.png",
              f"/v1/files/{j['id']}-1.png"] and top["params"]["prompt"] == "a lighthouse", f"listed job: {top}")
        check(lst["history"]["jobs"] == 2 and lst["history"]["max_jobs"] == 3, f"history: {lst['history']}")

        # Eviction by count: two more jobs push the oldest out (4 > --history 3): 410 with a clear message.
        later = [gen(srv, {**body, "seed": 20 + i}) for i in range(2)]
        is_gone(srv, f"/v1/files/{j['id']}-0.png", "evicted by count")
        is_gone(srv, f"/v1/jobs/{j['id']}/images/1", "evicted by count (jobs route)")
        s, js = srv.json("GET", f"/v1/jobs/{j['id']}")
        check(s == 200 and js["images_available"] == 0 and js["data"] == [] and "evicted" in js.get("images_gone", ""),
              f"evicted job record: {js}")
        for x in [jb] + later:
            s, _, _ = srv.request("GET", f"/v1/files/{x['id']}-0.png")
            check(s == 200, f"a job within the history: {x['id']} -> {s}")
        s, lst = srv.json("GET", "/v1/jobs")
        check(lst["history"]["jobs"] == 3, f"history after eviction: {lst['history']}")
        s, jn = srv.json("GET", "/v1/files/job_0123456789abcdef-0.png")
        check(s == 404, f"unknown file -> {s}")

        # Previews: while a stream listens, `preview` events carry a small PNG of the latents.
        evs, job = preview_events(srv, size, 200)
        pv = [e for e in evs if e[1] == "preview"]
        check(len(pv) >= 1, f"no preview events in {len(evs)} events: {[e[1] for e in evs][:20]}")
        if pv:
            p = pv[-1][2]
            check(p["image"].startswith("data:image/png;base64,"), f"preview image: {p['image'][:40]}")
            pw, ph, _, _ = png_info(base64.b64decode(p["image"].split(",", 1)[1]))
            check((pw, ph) == (p["width"], p["height"]) == (2 * w // sf, 2 * h // sf),
                  f"preview {pw}x{ph} ({p['width']}x{p['height']}), want {2 * w // sf}x{2 * h // sf}")
            check(0 < p["step"] <= p["total"] == 200, f"preview step {p['step']}/{p['total']}")
        check(evs and evs[-1][1] == "done", f"last event {evs[-1] if evs else None}")
        # Replayed later, a finished job's events hold no preview.
        again = srv.events(job, timeout=30)
        check(not [e for e in again if e[1] == "preview"], "a finished job replays preview events")
        # The header's state: /health counts no running job once the last one is done.
        s, hl = srv.json("GET", "/health")
        check(s == 200 and hl["running"] == 0 and hl["queued"] == 0, f"/health after the jobs: {hl}")
        rc = srv.terminate(60)
        check(rc == 0, f"exit code {rc}")
    finally:
        srv.close(show_log=bool(check.failures))
    return size


def test_bytes_and_no_preview(binary, model, size):
    body = {"prompt": "a harbour at night", "size": size, "steps": 2}
    # One PNG's size at this size, then a bound of about 2.5 of them.
    srv = Server(binary, model)
    try:
        one = len(base64.b64decode(gen(srv, {**body, "seed": 1})["data"][0]["b64_json"]))
    finally:
        srv.close()
    mib = f"{2.5 * one / (1 << 20):.9f}"
    srv = Server(binary, model, "--history-mib", mib, "--preview", "none", "--no-pe")
    try:
        bound = int(float(mib) * (1 << 20))
        s, info = srv.json("GET", "/v1/info")
        check(info.get("preview") == "none" and info["history"]["max_bytes"] == bound and info["prompt_enhancer"] is False,
              f"/v1/info with --preview none --no-pe: {info}")
        jobs = [gen(srv, {**body, "seed": 30 + i}) for i in range(5)]
        sizes = [len(base64.b64decode(x["data"][0]["b64_json"])) for x in jobs]
        # Kept: the newest jobs while their bytes fit (the newest always).
        keep, total = set(), 0
        for i in reversed(range(len(jobs))):
            total += sizes[i]
            if i == len(jobs) - 1 or total <= bound:
                keep.add(i)
            else:
                break
        check(2 <= len(keep) <= 3, f"expected 2 or 3 jobs within {bound} bytes of {sizes}, got {sorted(keep)}")
        for i, x in enumerate(jobs):
            if i in keep:
                s, _, png = srv.request("GET", f"/v1/files/{x['id']}-0.png")
                check(s == 200 and len(png) == sizes[i], f"job {i} within the byte bound -> {s}")
            else:
                is_gone(srv, f"/v1/files/{x['id']}-0.png", f"job {i} evicted by bytes")
        s, lst = srv.json("GET", "/v1/jobs")
        check(lst["history"]["jobs"] == len(keep) and lst["history"]["bytes"] <= max(bound, sizes[-1]),
              f"history by bytes: {lst['history']} (sizes {sizes}, bound {bound})")
        # --preview none: no preview event even while a stream listens.
        evs, _ = preview_events(srv, size, 200)
        check(evs and evs[-1][1] == "done" and not [e for e in evs if e[1] == "preview"],
              f"--preview none sent previews: {[e[1] for e in evs][:20]}")
        rc = srv.terminate(60)
        check(rc == 0, f"exit code {rc}")
    finally:
        srv.close(show_log=bool(check.failures))


def main():
    binary, data = sys.argv[1], sys.argv[2]
    model = os.path.join(data, "tiny-ernie-image", "model")
    t0 = time.time()
    size = test_url_and_history(binary, model)
    test_bytes_and_no_preview(binary, model, size)
    # Bad flags are errors at start.
    for flags in (["--history", "0"], ["--history-mib", "0"], ["--preview", "slow"]):
        r = subprocess.run([binary, "serve", "--model", model, "--port", "0", *flags], capture_output=True, text=True,
                           timeout=120)
        check(r.returncode != 0 and ("history" in r.stderr or "preview" in r.stderr), f"serve {flags}: {r.returncode} {r.stderr[-200:]}")
    print(f"took {time.time() - t0:.1f} s")
    check.done("server history test")


if __name__ == "__main__":
    main()
