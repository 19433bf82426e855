# The held-connections client of scripts/bench-proxy (case 7), run inside `capsule exec`.
#   tls_hold.py N HOST PORT HOLD
# Opens N connections to the proxy at once, each: CONNECT HOST:PORT, TLS (trusting
# SSL_CERT_FILE, set by capsule), one keep-alive GET /small with the Authorization
# header ($BENCH_TOKEN, a placeholder), read the answer; then holds all of them open
# HOLD seconds (below the proxy's 10 s idle limit) and closes them.
import asyncio, json, os, resource, ssl, sys, time
from urllib.parse import urlsplit

n, host, port, hold = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
proxy = urlsplit(os.environ["HTTPS_PROXY"])
ctx = ssl.create_default_context()
req = ("GET /small HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\n\r\n"
       % (host, port, os.environ["BENCH_TOKEN"])).encode()


async def one(held):
    r, w = await asyncio.open_connection(proxy.hostname, proxy.port)
    held.append(w)
    w.write(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host.encode(), port, host.encode(), port))
    head = await r.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError("CONNECT answered %r" % head[:40])
    await w.start_tls(ctx, server_hostname=host)
    w.write(req)
    head = await r.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError("GET answered %r" % head[:60])
    length = next((int(l.split(b":", 1)[1]) for l in head.split(b"\r\n")
                   if l.lower().startswith(b"content-length:")), None)
    if length is not None:
        body = await r.readexactly(length)
    else:  # chunked (the proxy drops Content-Length when it scrubs a response)
        body = b""
        while True:
            size = int((await r.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            body += await r.readexactly(size + 2)
            if size == 0:
                break
    if not body.startswith(b"ok\n"):
        raise RuntimeError("body %r" % body[:40])


async def main():
    held = []
    t = time.monotonic()
    res = await asyncio.gather(*(one(held) for _ in range(n)), return_exceptions=True)
    opened = time.monotonic() - t
    errs = [repr(e) for e in res if isinstance(e, BaseException)]
    await asyncio.sleep(hold)
    for w in held:
        w.close()
    print(json.dumps({"conns": n, "ok": n - len(errs), "errors": len(errs),
                      "first_errors": errs[:3], "open_seconds": opened}))

asyncio.run(main())
