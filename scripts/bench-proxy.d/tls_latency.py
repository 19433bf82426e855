# The HTTPS latency client of scripts/bench-proxy (case 6), run inside `capsule exec`.
#   tls_latency.py N PORT CAFILE HOST[@TOKENFILE] ...
# For each HOST (round robin, so drift hits every host alike), N times each:
#   request:   a new connection (through HTTPS_PROXY with CONNECT when it is set),
#              TLS, GET /small with the Authorization header, read the answer, close;
#   handshake: a new connection (CONNECT when proxied), the TLS handshake alone, close.
# Trusted: what the environment names (SSL_CERT_FILE, set by capsule for the run's CA)
# plus CAFILE (the test CA). The header's token: the file TOKENFILE when given, else
# $BENCH_TOKEN (under capsule a placeholder, which the proxy replaces).
# Prints one JSON object: {host: {"request": [ms, ...], "handshake": [ms, ...]}}.
import http.client, json, os, socket, ssl, sys, time
from urllib.parse import urlsplit

n, port, cafile = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ctx = ssl.create_default_context()
ctx.load_verify_locations(cafile)
headers, hosts = {}, []
for spec in sys.argv[4:]:
    host, _, tokfile = spec.partition("@")
    token = open(tokfile).read().strip() if tokfile else os.environ["BENCH_TOKEN"]
    headers[host] = {"Authorization": "Bearer " + token}
    hosts.append(host)
proxy = urlsplit(os.environ["HTTPS_PROXY"]) if os.environ.get("HTTPS_PROXY") else None


def request(host):
    if proxy:
        c = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=ctx)
        c.set_tunnel(host, port)
    else:
        c = http.client.HTTPSConnection(host, port, context=ctx)
    try:
        c.request("GET", "/small", headers=headers[host])
        r = c.getresponse()
        body = r.read()
        if r.status != 200 or body != b"ok\n":
            raise RuntimeError("%s answered %d %r" % (host, r.status, body[:60]))
    finally:
        c.close()


def handshake(host):
    if proxy:
        s = socket.create_connection((proxy.hostname, proxy.port))
        s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host.encode(), port, host.encode(), port))
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            b = s.recv(4096)  # nothing follows the head: a TLS server waits for the hello
            if not b:
                raise RuntimeError("proxy closed during CONNECT")
            head += b
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError("CONNECT answered %r" % head[:40])
    else:
        s = socket.create_connection((host, port))
    with ctx.wrap_socket(s, server_hostname=host):
        pass


out = {}
for kind, fn in (("request", request), ("handshake", handshake)):
    for h in hosts:
        for _ in range(10):
            fn(h)
    ts = {h: [] for h in hosts}
    for _ in range(n):
        for h in hosts:
            t = time.perf_counter()
            fn(h)
            ts[h].append((time.perf_counter() - t) * 1e3)
    for h in hosts:
        out.setdefault(h, {})[kind] = ts[h]
print(json.dumps(out))
