"""A heartbeat monitor on loopback for the system tests: an HTTP server in a thread of the test process
that records every request (time, method, path, body) and answers 200 "OK", as healthchecks.io does."""
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HeartbeatReceiver:
    def __init__(self):
        self.requests = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                with receiver.lock:
                    receiver.requests.append({"at": time.monotonic(), "method": self.command, "path": self.path, "body": body})
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            do_GET = _record
            do_POST = _record
            do_HEAD = _record

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def seen(self):
        with self.lock:
            return list(self.requests)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
