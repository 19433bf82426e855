"""An HTTPS origin for the credential check of scripts/test-containers
(issue 38): answers whether the request carried `Authorization: Bearer
EXPECTED` (never echoing the header itself), on 127.0.0.1:PORT, with the
certificate the host made for the stage (a test CA given to capsule as
network.upstream_ca)."""
import http.server, json, ssl, sys

port, cert, key, expected = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        auth = self.headers.get("Authorization") or ""
        body = json.dumps({"auth_ok": auth == "Bearer " + expected,
                           "placeholder_seen": "capsule-phantom-" in auth}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


srv = http.server.HTTPServer(("127.0.0.1", port), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("ready", flush=True)
srv.serve_forever()
