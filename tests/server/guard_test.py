"""`ernie-image serve` against the attacks of issue 45 (items 1-3), over loopback, bounded in time and count:
bodies promised and never sent (with and without --api-key, plain and chunked), a client that buffers more than
its share, 256 event-stream clients while /health is probed, the stream caps, and a 10,000-part multipart body.
Clients come from several loopback addresses (127.0.0.N), as several machines would.

usage: guard_test.py ERNIE_IMAGE_BINARY TESTS_DATA_DIR"""
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverlib import Check, Server  # noqa: E402

KEY = "k-" + "7" * 20
check = Check()


def connect(srv, source="127.0.0.1", timeout=5.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect((srv.host, srv.port))
    return s


def read_response(s):
    """(status or None, the bytes) of one response with Content-Length, or up to the peer's close."""
    out = b""
    while True:
        try:
            b = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            break
        if not b:
            break
        out += b
        head, sep, body = out.partition(b"\r\n\r\n")
        if sep:
            n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
            if n and len(body) >= n[0]:
                break
    status = int(out.split(b" ")[1]) if out.startswith(b"HTTP/1.") else None
    return status, out


def auth(key):
    return b"Authorization: Bearer " + key.encode() + b"\r\n" if key else b""


def legit_post(srv, key, source="127.0.0.1"):
    """POST /v1/jobs of a small job: (status, seconds, job id)."""
    body = json.dumps({"prompt": "a cat", "size": "64x64", "steps": 1}).encode()
    t0 = time.monotonic()
    s = connect(srv, source)
    try:
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth(key) + b"Content-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        st, out = read_response(s)
    finally:
        s.close()
    dt = time.monotonic() - t0
    job = json.loads(out.partition(b"\r\n\r\n")[2] or b"{}").get("id") if st == 202 else None
    return st, dt, job


def reserving_connections(srv, key, send_key):
    """Item 1: four connections promise 16 MiB bodies (two plain, two chunked) and send one byte; a legitimate
    POST is answered at once, the four are cut within seconds (401 at once when they lack the key)."""
    socks = []
    for i in range(4):
        s = connect(srv)
        framing = b"Content-Length: 16777216\r\n\r\nx" if i < 2 else b"Transfer-Encoding: chunked\r\n\r\n"
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + (auth(key) if send_key else b"") +
                  b"Content-Type: application/json\r\n" + framing)
        socks.append(s)
    time.sleep(0.3)
    what = f"reserving ({'with' if key else 'no'} --api-key, {'key sent' if send_key else 'no key'})"
    st, dt, job = legit_post(srv, key)
    check(st == 202 and dt < 1.0, f"{what}: a legitimate POST gets {st} after {dt:.2f} s, want 202 within 1 s")
    if job:
        srv.request("DELETE", f"/v1/jobs/{job}", headers={"Authorization": f"Bearer {key}"} if key else {})
    t0 = time.monotonic()
    statuses = []
    for s in socks:
        s.settimeout(8)
        statuses.append(read_response(s)[0])
        s.close()
    dt = time.monotonic() - t0
    want = 408 if (send_key or not key) else 401
    check(statuses == [want] * 4 and dt < 7, f"{what}: the four get {statuses} after {dt:.1f} s, want {want} each within 7 s")


def greedy_client(srv, key):
    """Item 1: a client (127.0.0.2) that sends 3 bodies of 14 MiB at once passes its 32 MiB budget: it gets a
    503, and a request from another client is still served."""
    chunk = b"x" * (1 << 20)
    socks, statuses = [], []
    for _ in range(3):
        s = connect(srv, "127.0.0.2", timeout=10)
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth(key) + b"Content-Length: 16777216\r\n\r\n")
        socks.append(s)
    def send(s):
        try:
            for _ in range(14):
                s.sendall(chunk)
        except OSError:
            pass
    threads = [threading.Thread(target=send, args=(s,)) for s in socks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    st, dt, job = legit_post(srv, key)
    check(st == 202 and dt < 1.0, f"greedy client: another client's POST gets {st} after {dt:.2f} s, want 202 within 1 s")
    if job:
        srv.request("DELETE", f"/v1/jobs/{job}", headers={"Authorization": f"Bearer {key}"} if key else {})
    for s in socks:
        s.settimeout(8)
        st, out = read_response(s)
        statuses.append(st)
        s.close()
    check(statuses.count(503) >= 1 and set(statuses) <= {503, 408},
          f"greedy client: its requests get {statuses}, want a 503 (over its budget), the others 503 or 408")


def open_stream(srv, job, source, key):
    s = connect(srv, source, timeout=10)
    s.sendall(b"GET /v1/jobs/%s/events HTTP/1.1\r\nHost: x\r\n" % job.encode() + auth(key) + b"\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(4096)
        if not b:
            break
        head += b
    return s, head


def event_streams(srv, key):
    """Item 2: 256 stream clients on a running job (32 from each of 8 addresses) while /health is probed every
    0.5 s for 10 s: every probe within 1 s. Then the per-client cap: the 65th stream of one address gets 503
    with Retry-After."""
    h = {"Authorization": f"Bearer {key}"} if key else {}
    st, long_job = srv.json("POST", "/v1/jobs", {"prompt": "a cat", "size": "128x128", "steps": 1000}, headers=h)
    st2, queued = srv.json("POST", "/v1/jobs", {"prompt": "a dog", "size": "64x64", "steps": 1}, headers=h)
    check(st == 202 and st2 == 202, f"streams: jobs submitted ({st}, {st2})")
    job = queued["id"]  # waits behind the long one: its streams stay open
    streams, heads = [], []
    for i in range(256):
        s, head = open_stream(srv, job, f"127.0.0.{10 + i % 8}", key)
        streams.append(s)
        heads.append(head.split(b" ")[1] if head.startswith(b"HTTP/1.1") else head[:40])
    check(heads.count(b"200") == 256, f"streams: {heads.count(b'200')} of 256 opened (others: {set(heads)})")
    probes, slow = 0, []
    stop = time.monotonic() + 10
    while time.monotonic() < stop:
        t0 = time.monotonic()
        try:
            code = srv.request("GET", "/health", timeout=2)[0]
        except OSError:
            code = None
        dt = time.monotonic() - t0
        probes += 1
        if code != 200 or dt >= 1.0:
            slow.append((code, round(dt, 2)))
        time.sleep(max(0.0, 0.5 - dt))
    check(not slow, f"streams: {len(slow)} of {probes} /health probes failed or took 1 s or more: {slow[:5]}")
    cap = []
    for _ in range(65):
        s, head = open_stream(srv, job, "127.0.0.30", key)
        cap.append((s, head))
    last = cap[-1][1]
    check(all(hd.startswith(b"HTTP/1.1 200") for _, hd in cap[:64]) and last.startswith(b"HTTP/1.1 503") and
          b"retry-after:" in last.lower(), f"streams: the 65th stream of one client gets {last[:200]!r}, want 503 + Retry-After")
    for s in streams + [s for s, _ in cap]:
        s.close()
    for j in (job, long_job["id"]):
        srv.request("DELETE", f"/v1/jobs/{j}", headers=h)


def many_parts(srv, key):
    """Item 3: a 10,000-part body to /v1/images/edits gets a 400 naming the limit, at once."""
    b = b"zzBOUNDzz"
    body = b"".join(b"--" + b + b"\r\nContent-Disposition: form-data; name=\"p%d\"\r\n\r\nv\r\n" % i for i in range(10000))
    body += b"--" + b + b"--\r\n"
    s = connect(srv, timeout=10)
    t0 = time.monotonic()
    s.sendall(b"POST /v1/images/edits HTTP/1.1\r\nHost: x\r\n" + auth(key) +
              b"Content-Type: multipart/form-data; boundary=" + b + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    st, out = read_response(s)
    s.close()
    dt = time.monotonic() - t0
    check(st == 400 and b"more than 64 parts" in out and dt < 1.0,
          f"multipart: 10,000 parts get {st} after {dt:.2f} s ({out[-200:]!r}), want 400 naming the limit at once")
    big_head = b"--" + b + b"\r\nContent-Disposition: form-data; name=\"x\"\r\nX-Pad: " + b"a" * 9000 + b"\r\n\r\nv\r\n--" + b + b"--\r\n"
    s = connect(srv, timeout=10)
    s.sendall(b"POST /v1/images/edits HTTP/1.1\r\nHost: x\r\n" + auth(key) +
              b"Content-Type: multipart/form-data; boundary=" + b + b"\r\nContent-Length: %d\r\n\r\n" % len(big_head) + big_head)
    st, out = read_response(s)
    s.close()
    check(st == 400 and b"8192 bytes" in out, f"multipart: a 9 KB part header gets {st} ({out[-200:]!r}), want 400 naming the limit")


def main():
    binary, data = sys.argv[1], sys.argv[2]
    model = os.path.join(data, "tiny-ernie-image", "model")
    for key in (None, KEY):
        srv = Server(binary, model, *(["--api-key", key] if key else []), "--quiet")
        try:
            if key:
                reserving_connections(srv, key, send_key=False)
            reserving_connections(srv, key, send_key=True)
            greedy_client(srv, key)
            if key is None:
                many_parts(srv, key)
                event_streams(srv, key)
            check(srv.request("GET", "/health", timeout=2)[0] == 200, "/health at the end")
            check(srv.terminate() == 0, "SIGTERM: exit 0")
        finally:
            srv.close(show_log=bool(check.failures))
    check.done("guard_test")


if __name__ == "__main__":
    main()
