"""flaky_proxy.py — a small HTTP proxy in front of a private S3 server for tests/s3/test_s3.sh.

Usage: python3 flaky_proxy.py LISTEN_PORT UPSTREAM_PORT LOG [MODE]
Forwards every request to 127.0.0.1:UPSTREAM_PORT unchanged (headers, signature, body). For each
object whose key ends in .bin, in MODE "flaky" (the default) its first GET is answered 503
SlowDown, its second gets the real answer with one byte of the body flipped (a corruption on the
way), later ones pass; in MODE "etag" its first GET is flipped, its second passes with another
ETag (the object as if replaced between the two fetches by one with the right bytes); in MODE
"pass" every request passes (the log counts them). One line
per GET goes to LOG: "KEY ATTEMPT ACTION". Every other request (PUT, POST, DELETE, HEAD) passes
and logs "METHOD PATH?QUERY STATUS": a multipart upload's parts and its abort. An UploadPart (a PUT
with partNumber) that finds no other in flight waits up to 10 s for a second one, the first such
only (a parallel upload sends them at once; a serial one waits in vain) and logs "inflight N",
the most at once so far;
in MODE "failpart" part 3 of every upload answers 500 InternalError (the upload fails).
In MODE "trickle" a GET of a key ending in $PROXY_KEYS (every key when unset) gets the store's
status and headers, then its body 2 bytes every 0.9 s (a store slowed to a trickle; logs "KEY
trickle"); in MODE "oversize" such a GET gets the store's status and headers but Content-Length
10^15 (with PROXY_CHUNKED=1 none: a chunked body), then the store's body and zeros until the
client hangs up or 256 MiB went (a store whose sizes cannot be trusted; logs "KEY oversize SENT");
in MODE "slow" the first FLAKY_SLOW_AFTER (environment, default 0) GETs of .bin keys pass and every
later one is a store that trickles: its status and headers at once, then its body 2 bytes every
0.9 s (logged "KEY ATTEMPT slow"; the client's cancel ends it).
Stdlib only; stopped by its PID.
"""
import http.client
import http.server
import os
import sys
import threading
import time

LISTEN, UPSTREAM, LOG = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
MODE = sys.argv[4] if len(sys.argv) > 4 else "flaky"
PLAN = {"flaky": {1: "503", 2: "flip"}, "etag": {1: "flip", 2: "etag"}, "pass": {},
        "failpart": {}, "trickle": {}, "oversize": {}, "slow": {}}[MODE]
seen = {}
lock = threading.Lock()
parts = {"now": 0, "most": 0}
more = threading.Condition(lock)
slow_gets = {"n": 0}


def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")


def send_head(handler, r, length):
    """The store's status and headers, Content-Length `length` (None: chunked)."""
    handler.send_response(r.status)
    for k, v in r.getheaders():
        if k.lower() not in ("content-length", "connection", "transfer-encoding"):
            handler.send_header(k, v)
    handler.send_header(*(("Content-Length", str(length)) if length is not None
                          else ("Transfer-Encoding", "chunked")))
    handler.end_headers()


def trickle_get(handler):
    """MODE "trickle": the body of a GET of a key ending in $PROXY_KEYS, 2 bytes every 0.9 s."""
    key = handler.path.split("?")[0]
    r, data = handler.forward()
    if not key.endswith(os.environ.get("PROXY_KEYS", "")):
        return handler.answer(r.status, r.getheaders(), data)
    log(f"{key} trickle")
    send_head(handler, r, len(data))
    try:
        for i in range(0, len(data), 2):
            handler.wfile.write(data[i:i + 2])
            time.sleep(0.9)
    except OSError:
        pass  # the client hung up


def oversize_get(handler):
    """MODE "oversize": a GET of a key ending in $PROXY_KEYS announced (or sent) as endless."""
    key = handler.path.split("?")[0]
    r, data = handler.forward()
    if not key.endswith(os.environ.get("PROXY_KEYS", "")):
        return handler.answer(r.status, r.getheaders(), data)
    chunked = os.environ.get("PROXY_CHUNKED") == "1"
    send_head(handler, r, None if chunked else 10**15)
    sent, block = 0, data
    try:
        while sent < 256 << 20:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
            sent += len(block)
            block = bytes(65536)
    except OSError:
        pass  # the client hung up
    handler.close_connection = True  # the body announced is not all there
    log(f"{key} oversize {sent}")


GET_MODES = {"trickle": trickle_get, "oversize": oversize_get}


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        conn = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=30)
        conn.request(self.command, self.path, body=body, headers=dict(self.headers))
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r, data

    def answer(self, status, headers, data):
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if MODE in GET_MODES:
            return GET_MODES[MODE](self)
        key = self.path.split("?")[0]
        with lock:
            seen[key] = seen.get(key, 0) + 1
            attempt = seen[key]
        if MODE == "slow" and key.endswith(".bin"):
            return self.slow(key, attempt)
        action = PLAN.get(attempt, "pass") if key.endswith(".bin") else "pass"
        with open(LOG, "a") as f:
            f.write(f"{key} {attempt} {action}\n")
        if action == "503":
            body = b'<?xml version="1.0"?><Error><Code>SlowDown</Code></Error>'
            return self.answer(503, [("Content-Type", "application/xml")], body)
        r, data = self.forward()
        headers = r.getheaders()
        if action == "flip" and len(data) > 80:
            data = data[:80] + bytes([data[80] ^ 0xFF]) + data[81:]
        if action == "etag":
            headers = [(k, '"0123456789abcdef0123456789abcdef"' if k.lower() == "etag" else v)
                       for k, v in headers]
        self.answer(r.status, headers, data)

    def slow(self, key, attempt):
        with lock:
            slow_gets["n"] += 1
            trickle = slow_gets["n"] > int(os.environ.get("FLAKY_SLOW_AFTER", "0"))
        log(f"{key} {attempt} {'slow' if trickle else 'pass'}")
        r, data = self.forward()
        if not trickle:
            return self.answer(r.status, r.getheaders(), data)
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "transfer-encoding"):
                self.send_header(k, v)
        self.end_headers()
        try:
            for i in range(0, len(data), 2):
                self.wfile.write(data[i:i + 2])
                self.wfile.flush()
                time.sleep(0.9)
        except OSError:  # the client gave up (a cancel, its own deadline)
            self.close_connection = True

    def part_begin(self):
        with more:
            parts["now"] += 1
            parts["most"] = max(parts["most"], parts["now"])
            more.notify_all()
            if parts["most"] < 2 and not parts.get("waited"):
                parts["waited"] = True  # once: a serial client costs the test 10 s, not 10 s a part
                more.wait_for(lambda: parts["most"] >= 2, timeout=10)
            log(f"inflight {parts['most']}")

    def part_end(self):
        with more:
            parts["now"] -= 1

    def do_PUT(self):
        is_part = "partNumber=" in self.path
        if is_part:
            self.part_begin()
        try:
            if is_part and MODE == "failpart" and "partNumber=3&" in self.path:
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                log(f"{self.command} {self.path} 500")
                body = b'<?xml version="1.0"?><Error><Code>InternalError</Code></Error>'
                return self.answer(500, [("Content-Type", "application/xml")], body)
            r, data = self.forward()
            log(f"{self.command} {self.path} {r.status}")
            self.answer(r.status, r.getheaders(), data)
        finally:
            if is_part:
                self.part_end()

    do_HEAD = do_PUT
    do_POST = do_PUT
    do_DELETE = do_PUT


http.server.ThreadingHTTPServer(("127.0.0.1", LISTEN), Proxy).serve_forever()
