"""Network: none by default; proxy mode reaches only allow-listed hosts.

Every server here listens on 127.0.0.1, started by the test.
"""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from capsule_sandbox import SandboxConfig
from capsule_sandbox._binary import proxy_ok


class _Handler(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server API
        type(self).hits.append(self.path)
        body = b"hello through the proxy"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    _Handler.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def tcp_listener():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield sock.getsockname()[1], accepted
    stop.set()
    thread.join(2)
    sock.close()


def _require_proxy(doctor):
    # Skip only when capsule itself says proxy mode is unsupported here; when it
    # says nothing, the test runs (and fails if proxy mode is broken).
    if proxy_ok(doctor) is False:
        pytest.skip("capsule doctor reports proxy mode unsupported on this host")


def test_network_blocked_by_default(provider, tcp_listener):
    port, accepted = tcp_listener
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", port))  # the host's UDP side of the same port
    udp.settimeout(0.3)
    code = (
        "import socket\n"
        "for fam, addr in ((socket.AF_INET, ('127.0.0.1', PORT)),):\n"
        "    try:\n"
        "        s = socket.socket(fam, socket.SOCK_STREAM)\n"
        "        s.settimeout(3)\n"
        "        s.connect(addr)\n"
        "        print('CONNECTED')\n"
        "    except OSError as e:\n"
        "        print('blocked', type(e).__name__)\n"
        "try:\n"
        "    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    u.sendto(b'x', ('127.0.0.1', PORT))\n"
        "    print('UDP-SENT')\n"
        "except OSError as e:\n"
        "    print('udp blocked')\n"
    ).replace("PORT", str(port))
    ex = provider.run_once("agent-1", code)
    assert "CONNECTED" not in ex.result.stdout
    if ex.result.enforcement.get("loopback"):
        # The run's own loopback (its own network namespace): the datagram
        # went to the run's 127.0.0.1, the connect found nothing listening there.
        assert "ConnectionRefusedError" in ex.result.stdout, ex.result
    else:
        assert "UDP-SENT" not in ex.result.stdout
    assert ex.result.stdout.startswith("blocked"), ex.result
    assert accepted == []
    try:
        got = udp.recv(64)
    except OSError:
        got = None
    finally:
        udp.close()
    assert got is None, "a datagram reached the host's loopback"
    assert ex.result.enforcement.get("network") == "none"


def test_allowlisted_fetch_through_proxy(provider, http_server, doctor):
    _require_proxy(doctor)
    port = http_server.server_address[1]
    cfg = SandboxConfig(network_enabled=True, network_allowlist=["127.0.0.1"])
    code = (
        "import os, urllib.request\n"
        "assert os.environ.get('HTTP_PROXY') or os.environ.get('http_proxy'), 'no proxy env'\n"
        f"print(urllib.request.urlopen('http://127.0.0.1:{port}/allowed', timeout=10).read().decode())\n"
    )
    ex = provider.run_once("agent-1", code, config=cfg)
    assert ex.result.success, ex.result.stderr
    assert ex.result.stdout.strip() == "hello through the proxy"
    assert _Handler.hits == ["/allowed"]


def test_proxy_refuses_host_not_on_allowlist(provider, http_server, doctor):
    _require_proxy(doctor)
    port = http_server.server_address[1]
    cfg = SandboxConfig(network_enabled=True, network_allowlist=["allowed.invalid"])
    code = (
        "import urllib.request, urllib.error\n"
        "try:\n"
        f"    urllib.request.urlopen('http://127.0.0.1:{port}/denied', timeout=10)\n"
        "    print('FETCHED')\n"
        "except urllib.error.HTTPError as e:\n"
        "    print('refused', e.code)\n"
        "except OSError as e:\n"
        "    print('failed', e)\n"
    )
    ex = provider.run_once("agent-1", code, config=cfg)
    assert "FETCHED" not in ex.result.stdout
    assert ex.result.stdout.startswith("refused 403"), ex.result
    assert _Handler.hits == []
    assert "127.0.0.1" in ex.result.denied_hosts


def test_proxy_mode_blocks_direct_connections(provider, tcp_listener, doctor):
    _require_proxy(doctor)
    port, accepted = tcp_listener
    cfg = SandboxConfig(network_enabled=True, network_allowlist=["127.0.0.1"])
    code = (
        "import socket\n"
        "s = socket.socket()\n"
        "s.settimeout(3)\n"
        "try:\n"
        f"    s.connect(('127.0.0.1', {port}))\n"
        "    print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print('blocked')\n"
    )
    ex = provider.run_once("agent-1", code, config=cfg)
    assert ex.result.stdout.strip() == "blocked", ex.result
    assert accepted == []
