# Sourced by scripts/bench-proxy: the cases of issue #38 (credentials and HTTPS rules),
# cases 5-8, against the real TLS origin of tls-origin.sh. Uses BIN, PY, CURL, work,
# REPS, BULK_MB, LAT_N and the helpers median/ratio/mbps of the main script.
#
# Proxied runs use one policy: network.mode proxy, network.upstream_ca = the test CA,
# allow_hosts ["127.0.0.1:PORT" (a string: CONNECT splice), {host: "localhost:PORT"}
# (a map: TLS terminated), {host: "localhost:PORT2"} (terminated, no credential: the
# same origin on a second port, to tell termination's cost from injection's)], a credential `tok` from env BENCH_TOKEN for localhost:PORT
# (default injection: Authorization: Bearer {}), placeholder_env [BENCH_TOKEN]. The
# run trusts capsule's CA through the variables capsule sets (SSL_CERT_FILE,
# CURL_CA_BUNDLE, GIT_SSL_CAINFO); nothing turns verification off. The origin answers
# 401 without the real token, so every terminated case also checks the injection.
# Direct runs: the same client in `capsule exec --net unrestricted`, to the same origin,
# trusting the test CA, sending the real token.

here_d="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tls-origin.sh
source "$here_d/tls-origin.sh"
TLS_CONNS="${TLS_CONNS:-500}"
TLS_HOLD="${TLS_HOLD:-3}"
GIT_MB="${GIT_MB:-100}"
GIT_REPS="${GIT_REPS:-3}"

tls_setup() {
  tls="$work/tls"
  tls_origin_start "$tls" "$BULK_MB"
  tca="$tls/ca.pem"
  tok="$(cat "$tls/token")"
  printf 'Authorization: Bearer %s\n' "$tok" >"$tls/hdr"
  chmod 644 "$tls/hdr"
  cp "$here_d/tls_latency.py" "$here_d/tls_hold.py" "$work/"
  chmod 644 "$work/tls_latency.py" "$work/tls_hold.py"
  cat >"$work/terminated.yaml" <<EOF
version: 1
network:
  mode: proxy
  max_connections: 1024
  upstream_ca: $tca
  allow_hosts:
    - "127.0.0.1:$tls_port"
    - host: "localhost:$tls_port"
    - host: "localhost:$tls_port2"
credentials:
  - name: tok
    from: {env: BENCH_TOKEN}
    hosts: ["localhost:$tls_port"]
    placeholder_env: [BENCH_TOKEN]
EOF
  chmod 644 "$work/terminated.yaml"
  term=(exec --no-audit --policy "$work/terminated.yaml" --allow-read "$work" --)
  term_json=(exec --json --no-audit --policy "$work/terminated.yaml" --allow-read "$work" --)
  tdirect=(exec --no-audit --policy "$work/bench.yaml" --net unrestricted --allow-read "$work" --)
  echo "TLS origin: nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///') on 127.0.0.1:$tls_port (test CA, P-256 leaf for localhost and 127.0.0.1; one worker)"
  echo
}

# capsule with the credential's value in its environment (only capsule reads it)
tcap() { BENCH_TOKEN="$tok" "$BIN" "$@"; }

# 5. bulk ------------------------------------------------------------------------
tls_fetch() { # direct | terminated | rules-only | spliced -> bytes/s of one download of /blob
  local want=$((BULK_MB << 20)) out w='%{speed_download} %{size_download}\n'
  case $1 in
    direct) out="$("$BIN" "${tdirect[@]}" "$CURL" -sS --fail -o /dev/null -w "$w" --cacert "$tca" \
      --resolve "localhost:$tls_port:127.0.0.1" -H "@$tls/hdr" "https://localhost:$tls_port/blob")" ;;
    terminated) out="$(tcap "${term[@]}" /bin/sh -c \
      'exec "$0" -sS --fail -o /dev/null -w "$1" -H "Authorization: Bearer $BENCH_TOKEN" "$2"' \
      "$CURL" "$w" "https://localhost:$tls_port/blob")" ;;
    rules-only) out="$(tcap "${term[@]}" "$CURL" -sS --fail -o /dev/null -w "$w" -H "@$tls/hdr" \
      "https://localhost:$tls_port2/blob")" ;;
    spliced) out="$(tcap "${term[@]}" "$CURL" -sS --fail -o /dev/null -w "$w" --cacert "$tca" \
      -H "@$tls/hdr" "https://127.0.0.1:$tls_port/blob")" ;;
  esac
  set -- $out
  [[ ${2:-} == "$want" ]] || { echo "bulk: ${2:-no} bytes, want $want" >&2; return 1; }
  echo "$1"
}
run_tls_bulk() {
  echo "== 5. HTTPS bulk throughput, ${BULK_MB} MiB over one connection (median of $REPS rounds of direct, terminated, rules only, spliced; order rotating) =="
  local -A v r got
  local modes=(direct terminated rules-only spliced) m i j
  for i in $(seq 0 $((REPS - 1))); do
    for j in 0 1 2 3; do
      m="${modes[$(((i + j) % 4))]}"
      got[$m]="$(tls_fetch "$m")"
      v[$m]+="${got[$m]} "
    done
    for m in terminated rules-only spliced; do
      r[$m]+="$(awk -v a="${got[$m]}" -v b="${got[direct]}" 'BEGIN {print a/b}') "
    done
  done
  med() { printf '%s\n' $1 | median; }
  printf '%-34s %s\n' "direct (curl, TLS to nginx):" "$(mbps "$(med "${v[direct]}")")"
  printf '%-34s %-12s ratio %s (median of per-round ratios; target >= 60%%)\n' "terminated + credential injected:" \
    "$(mbps "$(med "${v[terminated]}")")" "$(ratio "$(med "${r[terminated]}")" 1)"
  printf '%-34s %-12s ratio %s (reported: termination without injection or scrubbing)\n' "terminated, no credential:" \
    "$(mbps "$(med "${v[rules-only]}")")" "$(ratio "$(med "${r[rules-only]}")" 1)"
  printf '%-34s %-12s ratio %s (target >= 70%%)\n' "CONNECT splice (not terminated):" \
    "$(mbps "$(med "${v[spliced]}")")" "$(ratio "$(med "${r[spliced]}")" 1)"
  echo
}

# 6. latency ---------------------------------------------------------------------
run_tls_latency() {
  local n=$(((LAT_N + REPS - 1) / REPS)) i
  echo "== 6. added latency of one small HTTPS request and of one TLS handshake ($REPS alternating rounds of $n, new connection each) =="
  for i in $(seq "$REPS"); do
    "$BIN" "${tdirect[@]}" "$PY" "$work/tls_latency.py" "$n" "$tls_port" "$tca" "localhost@$tls/token" >"$work/lat-d$i.json"
    tcap "${term[@]}" "$PY" "$work/tls_latency.py" "$n" "$tls_port" "$tca" localhost "127.0.0.1@$tls/token" >"$work/lat-p$i.json"
  done
  "$PY" - "$work" "$REPS" <<'PYEOF'
import json, statistics, sys
work, reps = sys.argv[1], int(sys.argv[2])
d, t, s = {}, {}, {}
for i in range(1, reps + 1):
    di, pi = json.load(open("%s/lat-d%d.json" % (work, i))), json.load(open("%s/lat-p%d.json" % (work, i)))
    for kind in ("request", "handshake"):
        d.setdefault(kind, []).extend(di["localhost"][kind])
        t.setdefault(kind, []).extend(pi["localhost"][kind])
        s.setdefault(kind, []).extend(pi["127.0.0.1"][kind])
def stats(ts):
    return {"median_ms": statistics.median(ts), "mean_ms": statistics.fmean(ts),
            "p90_ms": statistics.quantiles(ts, n=10)[-1]}
d, t, s = ({k: stats(v) for k, v in x.items()} for x in (d, t, s))
rows = (("direct", d), ("terminated", t), ("spliced", s))
for kind, what in (("request", "GET /small: connect, TLS, request, answer"),
                   ("handshake", "connect (+ CONNECT), TLS handshake, close; terminated: with the proxy only,"
                                 " it dials the origin at the first request")):
    print("-- %s (%s) --" % (kind, what))
    base = d[kind]["median_ms"]
    for name, r in rows:
        x = r[kind]
        extra = "" if r is d else "  added %+.3f ms (%.2fx)" % (x["median_ms"] - base, x["median_ms"] / base)
        print("%-11s median %.3f ms  mean %.3f ms  p90 %.3f ms%s" % (
            name + ":", x["median_ms"], x["mean_ms"], x["p90_ms"], extra))
PYEOF
  echo
}

# 7. supervisor RSS with TLS_CONNS terminated connections held open ---------------
run_tls_hold() {
  echo "== 7. $TLS_CONNS concurrent terminated connections, one request each, held ${TLS_HOLD}s =="
  local idle out
  idle="$(BENCH_TOKEN="$tok" "$PY" "$work/rss.py" "$BIN" "${term_json[@]}" "$PY" -c 'import time; time.sleep(1)')"
  out="$(BENCH_TOKEN="$tok" "$PY" "$work/rss.py" "$BIN" "${term_json[@]}" "$PY" "$work/tls_hold.py" \
    "$TLS_CONNS" localhost "$tls_port" "$TLS_HOLD")"
  "$PY" - "$idle" "$out" <<'PYEOF'
import json, sys
idle, r = json.loads(sys.argv[1]), json.loads(sys.argv[2])
res = r["result"] or {}
child = json.loads((res.get("stdout") or "{}").strip() or "{}")
p = (res.get("usage") or {}).get("proxy") or {}
mib = r["peak_kib"] / 1024
ok = child.get("errors") == 0 and child.get("ok") == child.get("conns")
verdict = "OK" if mib <= 96 and ok else "FAIL"
print("supervisor peak RSS %.1f MiB (idle terminated run %.1f MiB; %.0f KiB a connection over idle; target <= 96 MiB) %s" % (
    mib, idle["peak_kib"] / 1024, (r["peak_kib"] - idle["peak_kib"]) / max(1, child.get("ok") or 1), verdict))
used = {c.get("name"): c.get("requests") for c in res.get("credentials_used") or []}
print("%s/%s connections answered (%s errors, opened in %.2fs)%s; proxy: peak %s open, credential tok injected %s times, exit %s" % (
    child.get("ok"), child.get("conns"), child.get("errors"), child.get("open_seconds", 0),
    "".join("; " + e for e in child.get("first_errors", [])), p.get("peak_connections"), used.get("tok"),
    res.get("exit_code")))
PYEOF
  echo
}

# 8. git push --------------------------------------------------------------------
git_src_setup() { # GIT_MB files of 1 MiB of random bytes in one commit, one pack, stored (not deflated)
  local src="$tls/gitsrc" i
  git init -q "$src"
  git -C "$src" config core.compression 0
  for i in $(seq "$GIT_MB"); do head -c $((1 << 20)) /dev/urandom >"$src/f$i"; done
  git -C "$src" add .
  git -C "$src" -c user.name=bench -c user.email=bench@localhost commit -qm "bench: $GIT_MB MiB"
  git -C "$src" -c pack.window=0 repack -adq
  chmod -R a+rX "$src"
}
git_push() { # direct | terminated, bare-repo name -> seconds of the push (timed inside the run)
  local url="https://localhost:$tls_port/git/$2.git" ns
  git init -q --bare "$tls/git/$2.git"
  git -C "$tls/git/$2.git" config http.receivepack true
  git -C "$tls/git/$2.git" config receive.unpackLimit 1 # keep the pack (index-pack), as big hosts do
  # shellcheck disable=SC2016
  local timed='t0=$(date +%s%N); "$@"; t1=$(date +%s%N); echo $((t1 - t0))'
  case $1 in
    direct) ns="$("$BIN" "${tdirect[@]}" /bin/sh -c "$timed" sh /usr/bin/env GIT_SSL_CAINFO="$tca" \
      git -C "$tls/gitsrc" -c "http.curloptResolve=localhost:$tls_port:127.0.0.1" \
      -c "http.extraHeader=$(cat "$tls/hdr")" push -q "$url" HEAD:refs/heads/main)" ;;
    terminated) ns="$(tcap "${term[@]}" /bin/sh -c \
      't0=$(date +%s%N); git -C "$1" -c "http.extraHeader=Authorization: Bearer $BENCH_TOKEN" push -q "$2" HEAD:refs/heads/main; t1=$(date +%s%N); echo $((t1 - t0))' \
      sh "$tls/gitsrc" "$url")" ;;
  esac
  [[ "$(git -C "$tls/git/$2.git" rev-parse -q --verify refs/heads/main)" == "$(git -C "$tls/gitsrc" rev-parse HEAD)" ]] ||
    { echo "git push ($1) did not arrive" >&2; return 1; }
  rm -rf "$tls/git/$2.git"
  awk -v n="$ns" 'BEGIN {print n / 1e9}'
}
run_tls_git() {
  git_src_setup
  local pack d=() t=() r=() dv tv i
  pack="$(du -bc "$tls"/gitsrc/.git/objects/pack/*.pack | tail -1 | cut -f1)"
  echo "== 8. git push of $GIT_MB MiB ($(awk -v b="$pack" 'BEGIN {printf "%.1f", b/1048576}') MiB pack) over HTTPS to git http-backend (nginx + fcgiwrap), median of $GIT_REPS pairs =="
  for i in $(seq "$GIT_REPS"); do
    dv="$(git_push direct "d$i")"; tv="$(git_push terminated "t$i")"
    d+=("$dv"); t+=("$tv"); r+=("$(awk -v a="$dv" -v b="$tv" 'BEGIN {print a/b}')")
  done
  local dm tm
  dm="$(printf '%s\n' "${d[@]}" | median)"
  tm="$(printf '%s\n' "${t[@]}" | median)"
  printf '%-34s %.2f s (%s)\n' "direct:" "$dm" "$(mbps "$(awk -v b="$pack" -v s="$dm" 'BEGIN {print b/s}')")"
  printf '%-34s %.2f s (%s)  ratio %s (direct time / terminated time, median of pairs; target >= 60%%)\n' \
    "terminated + credential injected:" "$tm" "$(mbps "$(awk -v b="$pack" -v s="$tm" 'BEGIN {print b/s}')")" \
    "$(ratio "$(printf '%s\n' "${r[@]}" | median)" 1)"
  echo
}

run_terminated() {
  tls_setup
  run_tls_bulk
  run_tls_latency
  run_tls_hold
  run_tls_git
}
