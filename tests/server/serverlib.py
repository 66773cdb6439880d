"""Helpers for the `ernie-image serve` tests (Python 3 stdlib only): start a server on a free port,
make HTTP requests, read server-sent events, decode PNGs."""
import http.client
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib


class Server:
    """`ernie-image serve` on the tiny model, on a free loopback port (model None: no --model, an api node of
    the shared queue)."""

    def __init__(self, binary, model, *extra, env=None):
        self.cmd = [binary, "serve", *(["--model", model] if model else []), "--port", "0", "--threads", "1", *extra]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.stderr_lines = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        line = self._read_line(timeout=120)
        if "listening on http://" not in line:
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r}\n" + "".join(self.stderr_lines[-30:]))
        self.port = int(line.rsplit(":", 1)[1].strip().rstrip("/"))
        self.host = "127.0.0.1"

    def _drain_stderr(self):
        for l in self.proc.stderr:
            self.stderr_lines.append(l)

    def _read_line(self, timeout):
        out = []
        t = threading.Thread(target=lambda: out.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        return out[0] if out else ""

    def conn(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """Returns (status, headers dict, body bytes); body may be bytes, str or a JSON-able object."""
        h = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None, timeout=120):
        s, h, b = self.request(method, path, body, headers, timeout)
        return s, json.loads(b) if b else None

    def events(self, job_id, headers=None, timeout=120, on_event=None, last_id=None, stop_after=None, on_open=None):
        """Reads /v1/jobs/{id}/events to its end: a list of (id, type, data), ids as numbers where they are (the
        shared queue's are Redis stream ids, kept as text). `last_id` is sent as Last-Event-ID; `stop_after(events)`
        true stops reading; `on_open(headers)` sees the response headers; a connection that breaks ends the list."""
        c = self.conn(timeout)
        h = dict(headers or {})
        if last_id:
            h["Last-Event-ID"] = last_id
        c.request("GET", f"/v1/jobs/{job_id}/events", headers=h)
        r = c.getresponse()
        if r.status != 200:
            raise AssertionError(f"events: HTTP {r.status}: {r.read()[:300]!r}")
        assert r.getheader("Content-Type", "").startswith("text/event-stream"), r.getheaders()
        if on_open:
            on_open({k.lower(): v for k, v in r.getheaders()})
        out, cur = [], {}
        try:
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.decode().rstrip("\r\n")
                if line == "":
                    if "event" in cur:
                        i = cur.get("id", "0")
                        ev = (int(i) if i.isdigit() else i, cur["event"], json.loads(cur.get("data", "null")))
                        out.append(ev)
                        if on_event:
                            on_event(ev)
                        if stop_after and stop_after(out):
                            break
                    cur = {}
                elif line.startswith(":"):
                    continue
                else:
                    k, _, v = line.partition(": ")
                    cur[k] = v
        except (OSError, http.client.HTTPException):
            pass  # the server behind the stream went away
        c.close()
        return out

    def metrics(self):
        """GET /metrics as {name (with labels): value}."""
        _, _, b = self.request("GET", "/metrics")
        out = {}
        for l in b.decode().splitlines():
            if l and not l.startswith("#"):
                k, v = l.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def wait_idle(self, timeout=60, poll=0.02):
        """Waits until /health shows no queued and no running job."""
        end = time.time() + timeout
        while time.time() < end:
            s, j = self.json("GET", "/health")
            if j["queued"] == 0 and j["running"] == 0:
                return
            time.sleep(poll)
        raise AssertionError("server did not go idle")

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for l in f:
                if l.startswith("VmRSS:"):
                    return int(l.split()[1])
        return 0

    def terminate(self, timeout=60):
        """SIGTERM; returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self, show_log=False):
        """Kills the server if it still runs; with show_log, prints the tail of its log (after a failure)."""
        self.kill()
        if show_log:
            sys.stdout.write("server log (tail):\n" + "".join(self.stderr_lines[-40:]))


def png_info(data):
    """(width, height, text chunks dict, raw decompressed IDAT bytes) of an 8-bit RGB PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, text, idat = 8, {}, b""
    w = h = None
    while pos < len(data):
        n, = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert zlib.crc32(kind + body) & 0xffffffff == crc, f"bad CRC in {kind!r}"
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color == 2, "expected 8-bit RGB"
        elif kind == b"tEXt":
            k, _, v = body.partition(b"\0")
            text[k.decode("latin-1")] = v.decode("latin-1")
        elif kind == b"iTXt":
            k, _, rest = body.partition(b"\0")
            rest = rest[2:]  # compression flag, method
            _, _, rest = rest.partition(b"\0")  # language
            _, _, v = rest.partition(b"\0")  # translated keyword
            text[k.decode("latin-1")] = v.decode("utf-8")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    assert len(raw) == h * (1 + 3 * w), "IDAT size does not match IHDR"
    return w, h, text, raw


def pixels(data):
    """Unfiltered RGB rows of an 8-bit RGB PNG, as bytes (height * width * 3)."""
    w, h, _, raw = png_info(data)
    stride = 3 * w
    out = bytearray()
    prev = bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b = prev[i]
            c = prev[i - 3] if i >= 3 else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pr) & 255
        out += line
        prev = line
    return bytes(out)


def cli_pixels(binary, model, out_png, args, check):
    """`ernie-image generate --model MODEL` (one thread, quiet) writing out_png with these flags, as the image
    a server answer must equal: its pixels, or None after a failed `check`."""
    cmd = [binary, "generate", "--model", model, "--threads", "1", "-q", "-o", out_png, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if not check(r.returncode == 0, f"CLI {os.path.basename(out_png)}: exit {r.returncode}: {r.stderr[-500:]}"):
        return None
    with open(out_png, "rb") as f:
        return pixels(f.read())


class Check:
    """Counts checks; fails with the list of what went wrong at the end."""

    def __init__(self):
        self.n = 0
        self.failures = []

    def __call__(self, cond, what):
        self.n += 1
        if not cond:
            self.failures.append(what)
            print("FAIL:", what, flush=True)
        return cond

    def done(self, name):
        if self.failures:
            print(f"{name}: {len(self.failures)} of {self.n} checks failed", flush=True)
            raise SystemExit(1)
        print(f"{name}: all {self.n} checks passed", flush=True)
