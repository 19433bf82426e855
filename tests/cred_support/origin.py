# An HTTPS origin for tests/escape_credentials.rs, on 127.0.0.1 only, with a
# certificate from the test's own CA. Every request it receives is logged as
# one JSON line (method, raw target, headers in order, body), so a test can
# check what did (and did not) reach it.
#   argv: port_file log_file cert key
# Routes: /redirect?to=URL -> 302; /gzip -> gzip-encoded echo; /chunked -> echo
# in 3-byte chunks; /store (query and body kept) and /load; anything else -> a
# JSON echo, with the Authorization header and the query also echoed in
# response headers.
import gzip, http.server, json, ssl, sys, threading, urllib.parse

port_file, log_file, cert, key = sys.argv[1:5]
lock = threading.Lock()
stored = {"data": ""}


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def handle_one(self):
        body = self.body()
        rec = {
            "method": self.command,
            "path": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body": body.decode("latin-1"),
        }
        with lock:
            with open(log_file, "a") as f:
                f.write(json.dumps(rec) + "\n")
        url = urllib.parse.urlsplit(self.path)
        echo = json.dumps(rec).encode()
        extra = [
            ("X-Echo-Authorization", self.headers.get("Authorization", "")),
            ("X-Echo-Query", url.query),
        ]
        if url.path == "/redirect":
            to = urllib.parse.parse_qs(url.query).get("to", ["/"])[0]
            return self.reply(302, b"", [("Location", to)])
        if url.path == "/gzip":
            return self.reply(200, gzip.compress(echo), extra + [("Content-Encoding", "gzip")])
        if url.path == "/store":
            stored["data"] = url.query + "|" + body.decode("latin-1")
            return self.reply(200, b"stored\n", [])
        if url.path == "/load":
            return self.reply(200, stored["data"].encode(), [])
        if url.path == "/chunked":
            self.send_response(200)
            for k, v in extra:
                self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(echo), 3):
                piece = echo[i : i + 3]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        self.reply(200, echo, extra + [("Content-Type", "application/json")])

    def reply(self, code, body, headers):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = handle_one

    def log_message(self, *a):
        pass


s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
c.load_cert_chain(cert, key)
s.socket = c.wrap_socket(s.socket, server_side=True)
with open(port_file + ".tmp", "w") as f:
    f.write(str(s.server_address[1]))
import os
os.rename(port_file + ".tmp", port_file)
s.serve_forever()
