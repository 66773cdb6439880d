"""The same checks against both servers (issue 40, "one server"): `serve` (its own queue) and `serve --queue
redis://… --role all` (the shared queue, a real redis-server). Each check is one behaviour on which the two
servers differed and now agree:

- /health and /v1/info name the device and the dtype ("cpu", "f32" here);
- a /v1/files name with upper-case letters gets the API's JSON 404 naming the job (the shared server had a
  narrower pattern, so such a name fell through to "no route");
- response_format "url" builds the URL from the request's Host, and from the bound address when Host is
  unusable (the shared server copied any Host into the URL);
- the URL's file is the image of the response.

usage: both_servers_test.py ERNIE_IMAGE_BINARY TESTS_DATA_DIR"""
import base64
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Check, Server  # noqa: E402
from shared_queue_test import Redis  # noqa: E402

check = Check()


def same_behaviour(srv, name):
    s, h = srv.json("GET", "/health")
    check(s == 200 and h["status"] == "ok" and h["device"] == "cpu" and h["dtype"] == "f32",
          f"{name}: /health names device and dtype: {s} {h}")
    s, info = srv.json("GET", "/v1/info")
    check(s == 200 and info["device"] == "cpu" and info["dtype"] == "f32", f"{name}: /v1/info device, dtype: {s} {info}")
    check("model_limits" not in info and "lora_list" not in info and isinstance(info["loras"], bool),
          f"{name}: /v1/info keys: {sorted(info)}")
    s, e = srv.json("GET", "/v1/files/job_ABCdef0123-0.png")
    check(s == 404 and e["error"]["code"] == "not_found" and "job_ABCdef0123" in e["error"]["message"] and
          "no route" not in e["error"]["message"], f"{name}: an unknown file with upper case -> {s} {e}")
    sf = info["scale_factor"]
    body = {"prompt": "a lighthouse", "size": f"{8 * sf}x{8 * sf}", "steps": 1, "seed": 5, "response_format": "url"}
    for host, want in ((f"example.test:{srv.port}", f"http://example.test:{srv.port}/v1/files/"),
                       ("evil/x", f"http://127.0.0.1:{srv.port}/v1/files/")):
        s, j = srv.json("POST", "/v1/images/generations", body, headers={"Host": host}, timeout=300)
        ok = check(s == 200 and j["data"][0]["url"].startswith(want), f"{name}: url with Host {host!r}: {s} {j}")
        if ok:
            path = j["data"][0]["url"][len(want) - len("/v1/files/"):]
            s, hd, png = srv.request("GET", path)
            check(s == 200 and hd["content-type"] == "image/png" and png[:8] == b"\x89PNG\r\n\x1a\n",
                  f"{name}: GET {path} -> {s}")
    b = dict(body, response_format="b64_json")
    s, j = srv.json("POST", "/v1/images/generations", b, timeout=300)
    check(s == 200 and base64.b64decode(j["data"][0]["b64_json"])[:4] == b"\x89PNG" and j["seed"] == 5,
          f"{name}: b64_json -> {s}")


def main():
    binary, data = sys.argv[1], sys.argv[2]
    model = os.path.join(data, "tiny-ernie-image", "model")
    srv = Server(binary, model)
    try:
        same_behaviour(srv, "serve")
    finally:
        srv.close(show_log=bool(check.failures))
    redis_available = "Redis queue" in os.popen(f"{binary} --version").read()
    if redis_available:
        with tempfile.TemporaryDirectory() as tmp:
            r = Redis(tmp)
            try:
                shared = Server(binary, model, "--queue", f"redis://127.0.0.1:{r.port}", "--role", "all")
                try:
                    same_behaviour(shared, "serve --queue")
                finally:
                    shared.close(show_log=bool(check.failures))
            finally:
                r.kill()
    else:
        print("built without Redis: the shared server's half is left out")
    check.done("both servers test")


if __name__ == "__main__":
    main()
