#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A router and N replicas on one machine: starts N `verity serve` replicas on free loopback ports,
# waits until each answers /health, then runs `verity router` over them in the foreground on
# ROUTER_PORT. SIGTERM or Ctrl-C drains the router, then stops the replicas; the script exits with
# the router's status. Every argument is passed to each replica (the model, threads, limits).
#
#   contrib/router/local.sh -m model.gguf -t 1          # router on http://127.0.0.1:8080
#   ROUTER_PORT=9000 REPLICAS=3 contrib/router/local.sh -m model.gguf
#
# Environment: VERITY (the binary; default: verity on PATH, else build/release/verity),
# REPLICAS [2], ROUTER_PORT [8080; 0: any free port], ROUTER_ARGS (extra router options, such
# as "--api-key KEY"). On several machines, start `verity serve --host 0.0.0.0` on each and one
# `verity router --replica http://HOST1:PORT,http://HOST2:PORT` anywhere that reaches them: the
# router only needs HTTP to every replica. For prefill/decode disaggregation (a router, prefill
# and decode servers) see disagg_local.sh beside this file.
set -u
here=$(cd "$(dirname "$0")" && pwd)
V=${VERITY:-$(command -v verity || echo "$here/../../build/release/verity")}
N=${REPLICAS:-2}
logs=$(mktemp -d "${TMPDIR:-/tmp}/verity-router-XXXXXX")
pids=()
stop_all() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$logs"
}
trap stop_all EXIT
urls=""
for i in $(seq 1 "$N"); do
    "$V" serve --port 0 "$@" >"$logs/replica$i.log" 2>&1 &
    pids+=($!)
    port=""
    for _ in $(seq 1 1200); do
        port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$logs/replica$i.log")
        [ -n "$port" ] && break
        kill -0 "${pids[-1]}" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then
        echo "local.sh: replica $i did not start: $(tail -n 1 "$logs/replica$i.log")" >&2
        exit 2
    fi
    echo "local.sh: replica $i on http://127.0.0.1:$port" >&2
    urls="${urls:+$urls,}http://127.0.0.1:$port"
done
# the router in the background, so this shell can pass SIGTERM/SIGINT on and wait for its drain
# shellcheck disable=SC2086
"$V" router --port "${ROUTER_PORT:-8080}" --replica "$urls" ${ROUTER_ARGS:-} &
rpid=$!
trap 'kill -TERM "$rpid" 2>/dev/null' TERM INT
wait "$rpid"
st=$?
if kill -0 "$rpid" 2>/dev/null; then wait "$rpid"; st=$?; fi
exit "$st"
