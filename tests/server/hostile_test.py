"""`ernie-image serve` against hostile clients, before authentication, over loopback (issue 21): slowloris
sockets, a header flood, bad framing, malformed Authorization, and a synchronous request whose client goes
away. Bounded in time and count; each case fails on a server without the connection guard.

usage: hostile_test.py ERNIE_IMAGE_BINARY TESTS_DATA_DIR"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Check, Server  # noqa: E402

KEY = "k-" + "5" * 20
check = Check()


def raw(srv, data, timeout=5.0, read=True):
    """Sends raw bytes; returns (status or None, seconds until the answer, the response bytes)."""
    s = socket.create_connection((srv.host, srv.port), timeout=timeout)
    t0 = time.monotonic()
    try:
        s.sendall(data)
        if not read:
            return None, 0, b""
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not b:
                break
            out += b
            if b"\r\n\r\n" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if n and len(body) >= n[0]:
                    break
        dt = time.monotonic() - t0
        status = int(out.split(b" ")[1]) if out.startswith(b"HTTP/1.") else None
        return status, dt, out
    finally:
        s.close()


def health_within(srv, seconds):
    t0 = time.monotonic()
    try:
        status, _, _ = srv.request("GET", "/health", timeout=seconds)
        return status == 200 and time.monotonic() - t0 <= seconds
    except OSError:
        return False


def slowloris(srv):
    socks = []
    for _ in range(50):
        s = socket.create_connection((srv.host, srv.port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\n")
        socks.append(s)
    stop = time.monotonic() + 10
    probes, ok = 0, 0
    i = 0
    while time.monotonic() < stop:
        for s in socks:  # one header byte per socket per second
            try:
                s.send(b"X"[:1] if i % 2 else b"a")
            except OSError:
                pass
        probes += 1
        ok += health_within(srv, 1.0)
        i += 1
        time.sleep(0.5)
    check(ok == probes, f"slowloris: /health answered {ok} of {probes} probes within 1 s")
    for s in socks:
        s.close()


def header_flood(srv):
    start = srv.rss_kib()
    statuses = []

    def one():
        head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(300000))
        st, _, _ = raw(srv, head + b"\r\n", timeout=10)
        statuses.append(st)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(statuses == [431] * 8, f"header flood: statuses {statuses}, want 431 each")
    grown = srv.rss_kib() - start
    check(grown < 50 * 1024, f"header flood: RSS grew by {grown} kB (limit 50 MB)")
    check(health_within(srv, 1.0), "header flood: /health afterwards")


def framing(srv):
    body = b'{"prompt": "a cat"}'
    cases = [
        ("two different Content-Length", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 19\r\n"
         b"Content-Length: 20\r\n\r\n" + body, 400),
        ("chunked and Content-Length", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         b"Content-Length: 19\r\n\r\n13\r\n" + body + b"\r\n0\r\n\r\n", 400),
        ("Transfer-Encoding gzip", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        ("Content-Length -1", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
        ("Content-Length 2^64", b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551616\r\n\r\n",
         413),
        ("obsolete line folding", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\n\r\n", 400),
        ("space before the colon", b"GET /health HTTP/1.1\r\nHost : x\r\n\r\n", 400),
        ("no Host", b"GET /health HTTP/1.1\r\n\r\n", 400),
        ("two Hosts", b"GET /health HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
        ("NUL in a value", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: b\x00c\r\n\r\n", 400),
    ]
    for what, data, want in cases:
        st, dt, out = raw(srv, data)
        check(st == want and dt < 1.0, f"framing, {what}: {st} after {dt:.2f} s, want {want} at once ({out[:120]!r})")
    # Still served correctly: a chunked body (decoded before the library sees it) and a plain one.
    chunked = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
               b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\n" + body[:5] + b"\r\n" + (b"%x" % (len(body) - 5)) + b";ext=1\r\n" + body[5:] + b"\r\n0\r\n\r\n")
    st, _, out = raw(srv, chunked, timeout=30)
    check(st == 202, f"framing: a chunked job submission gets {st} ({out[:200]!r})")
    if st == 202:
        job = json.loads(out.partition(b"\r\n\r\n")[2])
        srv.request("DELETE", f"/v1/jobs/{job['id']}", headers={"Authorization": f"Bearer {KEY}"})


def auth(srv):
    def status(h):
        return srv.request("GET", "/v1/info", headers=h)[0] if h is not None else None
    check(status({"Authorization": f"Bearer {KEY}"}) == 200, "auth: Bearer KEY")
    check(status({"Authorization": f"bearer {KEY}"}) == 200, "auth: the scheme is case-insensitive (bearer)")
    check(status({"Authorization": f"BEARER  {KEY}"}) == 200, "auth: BEARER with two spaces")
    check(status({"Authorization": f"Bearer {KEY}x"}) == 401, "auth: a longer key")
    check(status({"Authorization": f"Basic {KEY}"}) == 401, "auth: another scheme")
    st, _, out = raw(srv, b"GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() + b"\x00\r\n\r\n")
    check(st in (400, 401), f"auth: Bearer KEY\\0 gets {st}, want 400 or 401")
    st, _, _ = raw(srv, b"GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                   b"\r\nAuthorization: Bearer " + KEY.encode() + b"\r\n\r\n")
    check(st == 401, f"auth: two Authorization fields get {st}, want 401")


def abandoned_sync_request(srv):
    """A client that leaves a synchronous generation: its job is cancelled, not run to the end."""
    body = json.dumps({"prompt": "a cat", "size": "64x64", "steps": 400}).encode()
    s = socket.create_connection((srv.host, srv.port), timeout=5)
    s.sendall(b"POST /v1/images/generations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(1.0)
    s.close()
    deadline = time.monotonic() + 20
    idle = False
    while time.monotonic() < deadline and not idle:
        st, h, b = srv.request("GET", "/health")
        g = json.loads(b)
        idle = g.get("running", 1) == 0 and g.get("queued", 1) == 0
        time.sleep(0.2)
    check(idle, f"abandoned request: the server is idle within 20 s of the client leaving ({g})")


def busy_port(srv, binary, model):
    """A second server on a port in use exits non-zero with a clear message (no silent SO_REUSEPORT split)."""
    r = subprocess.run([binary, "serve", "--model", model, "--port", str(srv.port), "--threads", "1", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode != 0 and "cannot listen" in r.stderr and "listening" not in r.stdout,
          f"busy port: exit {r.returncode}, stdout {r.stdout[-200:]!r}, stderr {r.stderr[-300:]!r}")


def main():
    binary, data = sys.argv[1], sys.argv[2]
    model = os.path.join(data, "tiny-ernie-image", "model")
    srv = Server(binary, model, "--api-key", KEY, "--quiet")
    try:
        check(health_within(srv, 1.0), "/health at the start")
        framing(srv)
        auth(srv)
        header_flood(srv)
        slowloris(srv)
        abandoned_sync_request(srv)
        busy_port(srv, binary, model)
        check(health_within(srv, 1.0), "/health at the end")
        check(srv.proc.poll() is None, "the server is still running")
        check(srv.terminate() == 0, "SIGTERM: exit 0")
    finally:
        srv.close(show_log=bool(check.failures))
    check.done("hostile_test")


if __name__ == "__main__":
    main()
