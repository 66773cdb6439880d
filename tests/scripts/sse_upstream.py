"""A stand-in api node for test_deploy_files.sh: a loopback HTTP server that logs each request as one line
(`NAME METHOD PATH`) on stdout. usage: sse_upstream.py PORT NAME ok|sick
- GET .../events: a server-sent event stream of 3 events, 0.4 s apart, ids 1-0..3-0; the first event's data
  echoes the request's Last-Event-ID and Authorization. Only /accel/... sends `X-Accel-Buffering: no` (serve
  sends it too), so that the events location is tested without it.
- any other GET: 200 and the name ("ok") or 503 ("sick", like a node whose Redis is away).
- POST: reads the body and answers 503, so that a proxy that sent it again elsewhere would be seen."""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, NAME, MODE = int(sys.argv[1]), sys.argv[2], sys.argv[3]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def log(self):
        print(NAME, self.command, self.path, flush=True)

    def reply(self, code, body):
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.log()
        if not self.path.endswith("/events"):
            return self.reply(200 if MODE == "ok" else 503, NAME.encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        if self.path.startswith("/accel/"):
            self.send_header("X-Accel-Buffering", "no")
        self.end_headers()  # HTTP/1.0: the stream ends when the connection closes
        for i in range(1, 4):
            data = {"n": i, "node": NAME}
            if i == 1:
                data["last_event_id"] = self.headers.get("Last-Event-ID", "")
                data["authorization"] = self.headers.get("Authorization", "")
            self.wfile.write(f"id: {i}-0\nevent: progress\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()
            if i < 3:
                time.sleep(0.4)

    def do_POST(self):
        self.log()
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.reply(503, b'{"error": {"code": "queue_unavailable"}}')


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
