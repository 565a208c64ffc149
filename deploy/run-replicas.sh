#!/usr/bin/env bash
# run-replicas.sh — a loopback demo of the deploy/nginx layout: N `offkv serve`
# replicas sharing one prefix-cache directory (and, with --redis-port, a
# redis-server they share), behind nginx with deploy/nginx/offkv.conf. Runs as
# any user: nginx's pid, logs and temporary files live in a fresh directory
# (printed), nothing is written to /etc or /var. Ctrl-C (or SIGTERM) stops
# nginx and sends the replicas SIGTERM, so their streams finish within
# --shutdown-grace. docs/deploy.md describes the layout.
#
# usage: deploy/run-replicas.sh PROGRAM.okv [-n N] [--port P] [--base-port B]
#            [--dir DIR] [--redis-port R] [--state DIR] [-- offkv serve options...]
#   -n N           replicas (default 2), on ports B+1 .. B+N (B default 8100)
#   --port P       nginx's port (default 8100)
#   --dir DIR      the shared --prefix-cache-dir (default: STATE/prefix-cache;
#                  "none": no directory, e.g. to share through Redis alone)
#   --redis-port R start redis-server on 127.0.0.1:R and give the replicas
#                  --prefix-cache-redis 127.0.0.1:R
#   --njs          take the affinity key from the body's prompt_cache_key /
#                  user too (nginx/offkv-key-njs.conf; needs libnginx-mod-http-js)
#   --state DIR    where configs, logs and pids go (default: a new temp dir);
#                  STATE/pids lists "name pid port" once everything is up
#   OFFKV=path     the offkv binary (default: build/src/cli/offkv of this repo)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
offkv="${OFFKV:-$here/../build/src/cli/offkv}"
n=2 port=8100 base="" dir="" redis_port="" state="" njs=0
program=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --base-port) base="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --redis-port) redis_port="$2"; shift 2 ;;
    --state) state="$2"; shift 2 ;;
    --njs) njs=1; shift ;;
    --) shift; break ;;
    -*) echo "run-replicas: unknown option $1" >&2; exit 2 ;;
    *) program="$1"; shift ;;
  esac
done
[ -n "$program" ] || { echo "usage: $0 PROGRAM.okv [-n N] [--port P] [--base-port B] [--dir DIR] [--redis-port R] [-- serve options]" >&2; exit 2; }
[ -x "$offkv" ] || { echo "run-replicas: no offkv binary at $offkv (build first, or set OFFKV)" >&2; exit 2; }
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { echo "run-replicas: nginx is not installed (scripts/setup.sh)" >&2; exit 2; }
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
base="${base:-$port}"
state="${state:-$(mktemp -d "${TMPDIR:-/tmp}/offkv-replicas.XXXXXX")}"
mkdir -p "$state"
dir="${dir:-$state/prefix-cache}"
pids=()

stop_all() {
  trap - INT TERM EXIT
  [ -f "$state/nginx.pid" ] && kill -QUIT "$(cat "$state/nginx.pid")" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop_all INT TERM EXIT

# 200 from GET /health on 127.0.0.1:$1 (bash's /dev/tcp: no curl needed)
healthy() {
  local line
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'GET /health HTTP/1.0\r\n\r\n' >&3
  read -r -t 2 line <&3 || true
  exec 3<&- 3>&-
  [[ "$line" == *" 200 "* ]]
}

wait_healthy() {   # port pid what
  for _ in $(seq 1 600); do
    healthy "$1" && return 0
    kill -0 "$2" 2>/dev/null || { echo "run-replicas: $3 exited; its log: $state/$3.log" >&2; tail -5 "$state/$3.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "run-replicas: $3 did not answer /health on port $1" >&2
  exit 1
}

: > "$state/pids"
serve_extra=()
if [ -n "$redis_port" ]; then
  command -v redis-server >/dev/null || { echo "run-replicas: redis-server is not installed (scripts/setup.sh)" >&2; exit 2; }
  redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no --dir "$state" \
    --maxmemory 1gb --maxmemory-policy allkeys-lru > "$state/redis.log" 2>&1 &
  pids+=($!)
  echo "redis $! $redis_port" >> "$state/pids"
  serve_extra+=(--prefix-cache-redis "127.0.0.1:$redis_port")
fi

dir_args=(--prefix-cache-dir "$dir" --prefix-cache-dir-shared)
[ "$dir" = none ] && dir_args=()
: > "$state/offkv-replicas.conf"
for i in $(seq 1 "$n"); do
  p=$((base + i))
  # behind nginx every connection comes from 127.0.0.1: no per-address cap
  "$offkv" serve "$program" --host 127.0.0.1 --port "$p" --max-connections-per-ip 0 \
    "${dir_args[@]}" "${serve_extra[@]}" "$@" > "$state/replica$i.log" 2>&1 &
  pids+=($!)
  echo "replica$i $! $p" >> "$state/pids.pending"
  echo "server 127.0.0.1:$p max_fails=2 fail_timeout=10s;" >> "$state/offkv-replicas.conf"
done

while read -r name pid p; do wait_healthy "$p" "$pid" "$name"; done < "$state/pids.pending"

sed "s/listen 127\.0\.0\.1:8100;/listen 127.0.0.1:$port;/" "$here/nginx/offkv.conf" > "$state/offkv.conf"
grep -q "listen 127.0.0.1:$port;" "$state/offkv.conf" || { echo "run-replicas: offkv.conf has no 'listen 127.0.0.1:8100;' line to set" >&2; exit 1; }
load_njs=""
if [ "$njs" = 1 ]; then
  njs_so=/usr/lib/nginx/modules/ngx_http_js_module.so
  [ -f "$njs_so" ] || { echo "run-replicas: --njs needs $njs_so (apt-get install libnginx-mod-http-js)" >&2; exit 2; }
  load_njs="load_module $njs_so;"
  cp "$here/nginx/offkv-key-njs.conf" "$state/offkv-key.conf"
  cp "$here/nginx/offkv-key.js" "$state/offkv-key.js"
else
  cp "$here/nginx/offkv-key-header.conf" "$state/offkv-key.conf"
fi
mkdir -p "$state/tmp"
cat > "$state/nginx.conf" <<EOF
# written by deploy/run-replicas.sh: deploy/nginx/offkv.conf with this run's ports
$load_njs
worker_processes 1;
pid $state/nginx.pid;
error_log $state/nginx-error.log;
events { worker_connections 1024; }
http {
    # which replica served each request (upstream: several when retried)
    log_format offkv '\$remote_addr [\$time_local] "\$request" \$status key="\$offkv_affinity" '
                     'upstream=\$upstream_addr upstream_status=\$upstream_status \$request_time';
    access_log $state/nginx-access.log offkv;
    client_body_temp_path $state/tmp/body;
    proxy_temp_path $state/tmp/proxy;
    fastcgi_temp_path $state/tmp/fastcgi;
    uwsgi_temp_path $state/tmp/uwsgi;
    scgi_temp_path $state/tmp/scgi;
    include $state/offkv.conf;
}
EOF
"$nginx_bin" -p "$state" -c "$state/nginx.conf" -e "$state/nginx-error.log" -g 'daemon off;' > "$state/nginx.log" 2>&1 &
pids+=($!)
nginx_pid=$!
for _ in $(seq 1 100); do
  { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null && { exec 3<&- 3>&-; break; }
  kill -0 "$nginx_pid" 2>/dev/null || { echo "run-replicas: nginx exited:" >&2; cat "$state/nginx.log" "$state/nginx-error.log" >&2; exit 1; }
  sleep 0.1
done
cat "$state/pids.pending" >> "$state/pids"
rm -f "$state/pids.pending"
echo "nginx $nginx_pid $port" >> "$state/pids"
echo "run-replicas: ready on http://127.0.0.1:$port ($n replicas on ports $((base + 1))..$((base + n)); state, logs: $state)"
wait "$nginx_pid" || true
