# Runs INSIDE the sandbox: raw HTTP/1.1 bytes through the run's proxy, in a
# TLS tunnel (CONNECT, then TLS verified against the run's CA bundle, which
# SSL_CERT_FILE names). argv[1]: a JSON list of cases
#   {"name", "connect": "host:port", "sni": name or null, "payload": text}
# with {PH} in the payload replaced by $MY_TOKEN (the placeholder the run holds),
# then {CL} by the length of what follows the first blank line (the body).
# Prints one JSON line per case: {"name", "status", "response"} (status 0: the
# tunnel or TLS handshake failed; "response" then says why).
import json, os, socket, ssl, sys, urllib.parse

proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
ph = os.environ.get("MY_TOKEN", "")


def read_all(s):
    out = b""
    s.settimeout(8)
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (socket.timeout, ssl.SSLError, OSError):
        pass
    return out


def case(c):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (c["connect"], c["connect"])).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            return 0, "proxy closed during CONNECT: %r" % head
        head += b
    if not head.startswith(b"HTTP/1.1 200"):
        return int(head.split()[1]), head.decode("latin-1")
    ctx = ssl.create_default_context()
    try:
        t = ctx.wrap_socket(s, server_hostname=c.get("sni"))
    except (ssl.SSLError, OSError) as e:
        return 0, "TLS: %s" % e
    payload = c["payload"].replace("{PH}", ph)
    if "{CL}" in payload:
        body = payload.split("\r\n\r\n", 1)[1]
        payload = payload.replace("{CL}", str(len(body)), 1)
    t.sendall(payload.encode("latin-1"))
    resp = read_all(t).decode("latin-1")
    try:
        status = int(resp.split(" ", 2)[1])
    except (IndexError, ValueError):
        status = 0
    return status, resp


for c in json.loads(sys.argv[1]):
    try:
        status, resp = case(c)
    except Exception as e:  # the test reads the reason
        status, resp = 0, "error: %r" % e
    print(json.dumps({"name": c["name"], "status": status, "response": resp}), flush=True)
