# The HTTPS echo of tests/egress_support: python3 echo.py CERT KEY TOKEN LOG
# Answers every request with JSON {method, path, headers, auth}: `auth` says
# what the Authorization header carried ("token": Bearer TOKEN or Basic with
# password TOKEN; "placeholder": a capsule-phantom- value; "none"; "other"),
# and every occurrence of TOKEN in the echoed headers reads "<REAL-TOKEN>",
# so a run may print the answer without the token reaching capsule's output.
# Each raw request is appended to LOG as one JSON line (read on the host).
import base64, http.server, json, ssl, sys, threading

CERT, KEY, TOKEN, LOG = sys.argv[1:5]
lock = threading.Lock()


def auth_kind(value):
    if value is None:
        return "none"
    if value == "Bearer " + TOKEN:
        return "token"
    if value.startswith("Basic "):
        try:
            user, _, pw = base64.b64decode(value[6:]).decode().partition(":")
        except Exception:
            return "other"
        if pw == TOKEN:
            return "token"
        value = pw
    return "placeholder" if "capsule-phantom-" in value else "other"


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        headers = [[k, v] for k, v in self.headers.items()]
        with lock, open(LOG, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path, "headers": headers,
                                "body_len": len(body)}) + "\n")
        shown = [[k, v.replace(TOKEN, "<REAL-TOKEN>")] for k, v in headers]
        out = json.dumps({"method": self.command, "path": self.path.replace(TOKEN, "<REAL-TOKEN>"),
                          "headers": shown, "auth": auth_kind(self.headers.get("Authorization")),
                          "body_len": len(body)}).encode() + b"\n"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = answer

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(CERT, KEY)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
