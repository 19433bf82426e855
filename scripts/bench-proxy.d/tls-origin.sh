# Sourced by scripts/bench-proxy: a real TLS origin on the host's loopback for the
# terminated-proxy cases. Defines tls_origin_start DIR BULK_MB (sets tls_port,
# tls_port2, tls_pids) and tls_origin_stop.
#
# DIR/ca.pem       a test CA made here (P-256, valid 2 days); its key stays in DIR/priv
# DIR/token        the bench credential's value (random); nginx answers 401 without
#                  `Authorization: Bearer <it>` (so a proxied run shows the injection worked)
# nginx (run as the current user, one worker, access log off) on 127.0.0.1:tls_port
# and :tls_port2 (the same server), leaf for DNS:localhost and IP:127.0.0.1:
#   GET /small         3 bytes
#   GET /blob          BULK_MB MiB of random bytes (a file: nginx reads it from the page cache)
#   /git/NAME.git/...  git http-backend (smart HTTP, push enabled) through fcgiwrap,
#                      repositories under DIR/git
# Nothing listens beyond 127.0.0.1 (the fcgiwrap socket is a Unix socket in DIR).

NGINX="${NGINX:-/usr/sbin/nginx}"
FCGIWRAP="${FCGIWRAP:-/usr/sbin/fcgiwrap}"
GIT_BACKEND="${GIT_BACKEND:-/usr/lib/git-core/git-http-backend}"
tls_pids=()

tls_free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

tls_make_ca() { # dir
  local d="$1"
  mkdir -p "$d/priv"
  chmod 700 "$d/priv"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -keyout "$d/priv/ca.key" -out "$d/ca.pem" -subj "/CN=capsule bench-proxy test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$d/priv/leaf.key" -out "$d/priv/leaf.csr" -subj "/CN=localhost" 2>/dev/null
  printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$d/priv/leaf.ext"
  openssl x509 -req -in "$d/priv/leaf.csr" -CA "$d/ca.pem" -CAkey "$d/priv/ca.key" \
    -CAcreateserial -days 2 -extfile "$d/priv/leaf.ext" -out "$d/priv/leaf.pem" 2>/dev/null
  chmod 644 "$d/ca.pem"
}

tls_nginx_conf() { # dir port port2 token
  local d="$1" port="$2" port2="$3" token="$4" user=""
  [[ $(id -u) == 0 ]] && user="user root;"
  cat <<EOF
daemon off;
$user
worker_processes 1;
worker_rlimit_nofile 8192;
pid $d/nginx/nginx.pid;
error_log $d/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $d/nginx/body;
  proxy_temp_path $d/nginx/proxy;
  fastcgi_temp_path $d/nginx/fastcgi;
  uwsgi_temp_path $d/nginx/uwsgi;
  scgi_temp_path $d/nginx/scgi;
  sendfile on;
  keepalive_timeout 300s;
  keepalive_requests 1000000;
  client_max_body_size 0;
  default_type application/octet-stream;
  server {
    listen 127.0.0.1:$port ssl backlog=4096;
    listen 127.0.0.1:$port2 ssl backlog=4096;
    server_name localhost 127.0.0.1;
    ssl_certificate $d/priv/leaf.pem;
    ssl_certificate_key $d/priv/leaf.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    if (\$http_authorization != "Bearer $token") { return 401 "no credential\n"; }
    location = /small { return 200 "ok\n"; }
    location = /blob { alias $d/www/blob; }
    location ~ ^/git(/.*)\$ {
      fastcgi_pass unix:$d/fcgi.sock;
      fastcgi_read_timeout 300s;
      fastcgi_param SCRIPT_FILENAME $GIT_BACKEND;
      fastcgi_param GIT_PROJECT_ROOT $d/git;
      fastcgi_param GIT_HTTP_EXPORT_ALL "";
      fastcgi_param PATH_INFO \$1;
      fastcgi_param QUERY_STRING \$query_string;
      fastcgi_param REQUEST_METHOD \$request_method;
      fastcgi_param CONTENT_TYPE \$content_type;
      fastcgi_param CONTENT_LENGTH \$content_length;
      fastcgi_param HTTP_CONTENT_ENCODING \$http_content_encoding;
      fastcgi_param SERVER_PROTOCOL \$server_protocol;
      fastcgi_param REMOTE_ADDR \$remote_addr;
      fastcgi_param REMOTE_USER bench;
    }
  }
}
EOF
}

tls_origin_start() { # dir bulk_mb
  local d="$1" mb="$2"
  for t in "$NGINX" "$FCGIWRAP" "$GIT_BACKEND"; do
    [[ -x "$t" ]] || { echo "missing $t (apt-get install nginx fcgiwrap git)" >&2; return 1; }
  done
  mkdir -p "$d/nginx" "$d/www" "$d/git"
  tls_make_ca "$d"
  head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$d/token"
  head -c $((mb << 20)) /dev/urandom >"$d/www/blob"
  chmod 644 "$d/token" "$d/www/blob"
  tls_port="$(tls_free_port)"
  tls_port2="$(tls_free_port)"
  [[ $tls_port2 != "$tls_port" ]] || tls_port2="$(tls_free_port)"
  tls_nginx_conf "$d" "$tls_port" "$tls_port2" "$(cat "$d/token")" >"$d/nginx/nginx.conf"
  # one process (no -c): with -c N its children outlive a TERM to the parent
  "$FCGIWRAP" -s "unix:$d/fcgi.sock" </dev/null >>"$d/nginx/fcgiwrap.log" 2>&1 &
  tls_pids+=($!)
  "$NGINX" -p "$d/nginx" -c "$d/nginx/nginx.conf" -e "$d/nginx/error.log" </dev/null >>"$d/nginx/error.log" 2>&1 &
  tls_pids+=($!)
  local _
  for _ in $(seq 100); do
    [[ -S "$d/fcgi.sock" ]] && "$CURL" -sf -o /dev/null --cacert "$d/ca.pem" \
      -H "Authorization: Bearer $(cat "$d/token")" "https://127.0.0.1:$tls_port/small" && return 0
    sleep 0.05
  done
  echo "the TLS origin did not come up; $d/nginx/error.log:" >&2
  cat "$d/nginx/error.log" >&2
  return 1
}

tls_origin_stop() {
  local p
  for p in "${tls_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${tls_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  tls_pids=()
}
