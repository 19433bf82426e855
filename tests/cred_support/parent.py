# Runs INSIDE the sandbox: look for the credential VALUE (argv[1]: its first
# half and second half, so this script's own argv never holds it whole) in every
# process visible (environ, memory, ptrace), and for any private key in the
# run's CA bundle or its temporary directory. Prints one JSON object.
import ctypes, errno, json, os, re, sys

needle = (sys.argv[1] + sys.argv[2]).encode()
me = os.getpid()
mine = set()
p = me
while p > 1:
    mine.add(p)
    try:
        p = int(open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[1])
    except OSError:
        break
found, tried = [], {}
libc = ctypes.CDLL(None, use_errno=True)
try:
    pids = {int(d) for d in os.listdir("/proc") if d.isdigit()}
except OSError:  # no private /proc: listing it is refused; aim at the parent
    pp = os.getppid()
    pids = {q for q in range(max(pp - 8, 2), pp + 8)} | {pp}
for pid in sorted(pids):
    if not os.path.exists("/proc/%d" % pid) and pid != os.getppid():
        continue
    r = {}
    for what in ("environ", "cmdline"):
        try:
            if needle in open("/proc/%d/%s" % (pid, what), "rb").read():
                found.append("%d/%s" % (pid, what))
            r[what] = "ok"
        except OSError as e:
            r[what] = errno.errorcode.get(e.errno, str(e.errno))
    if pid in mine:
        continue
    try:
        fd = os.open("/proc/%d/mem" % pid, os.O_RDONLY)
        try:
            maps = open("/proc/%d/maps" % pid).read().splitlines()
            for line in maps[:64]:
                a, b = [int(x, 16) for x in line.split()[0].split("-")]
                try:
                    if needle in os.pread(fd, min(b - a, 1 << 20), a):
                        found.append("%d/mem" % pid)
                except OSError:
                    pass
            r["mem"] = "ok"
        finally:
            os.close(fd)
    except OSError as e:
        r["mem"] = errno.errorcode.get(e.errno, str(e.errno))
    rc = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
    r["ptrace"] = "ok" if rc == 0 else errno.errorcode.get(ctypes.get_errno(), "?")
    if rc == 0:
        libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    tried[pid] = r
bundle = open(os.environ["SSL_CERT_FILE"]).read()
keys = []
for root in ("/tmp", os.path.dirname(os.environ["SSL_CERT_FILE"]), "/etc/ssl"):
    for dp, _, files in os.walk(root):
        for f in files:
            try:
                if b"PRIVATE KEY" in open(os.path.join(dp, f), "rb").read(1 << 20):
                    keys.append(os.path.join(dp, f))
            except OSError:
                pass
certs = re.findall(r"-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----", bundle)
print(json.dumps({
    "found": found, "tried": tried, "mine": sorted(mine), "ppid": os.getppid(),
    "bundle_has_key": "PRIVATE KEY" in bundle, "key_files": keys,
    "ca": certs[-1] if certs else "", "placeholder": os.environ.get("MY_TOKEN", ""),
}))
