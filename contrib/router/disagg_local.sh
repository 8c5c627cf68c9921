#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Prefill/decode disaggregation on one machine: starts PREFILL `verity serve --role prefill` and
# DECODE `verity serve --role decode` servers on free loopback ports, waits until each is up, then
# runs `verity router --prefill ... --decode ...` over them in the foreground on ROUTER_PORT.
# SIGTERM or Ctrl-C drains the router, then stops the servers; the script exits with the router's
# status. Every argument is passed to each server (the model, threads, limits, --kv-transport).
#
#   contrib/router/disagg_local.sh -m model.gguf -t 1        # router on http://127.0.0.1:8080
#   PREFILL=1 DECODE=3 ROUTER_PORT=9000 contrib/router/disagg_local.sh -m model.gguf
#
# Environment: VERITY (the binary; default: verity on PATH, else build/release/verity),
# PREFILL [2], DECODE [2], ROUTER_PORT [8080; 0: any free port], ROUTER_ARGS (extra router
# options, such as "--api-key KEY").
#
# On several machines (the servers only need to reach each other over TCP, or UCX where built):
#   - on each prefill machine:  verity serve --role prefill --host 0.0.0.0 --port 8080 -m M
#   - on each decode machine:   verity serve --role decode --host 0.0.0.0 --port 8080 \
#                                   --kv-listen 0.0.0.0:9100 -m M
#     (a decode server reports its KV address in GET /v1/status as kv_addr; with a wildcard host
#     the router substitutes the host of the decode server's URL, so the prefill servers connect
#     to DECODE_HOST:9100: open that port between the prefill and the decode machines)
#   - anywhere that reaches them all over HTTP:
#       verity router --prefill http://P1:8080,http://P2:8080 --decode http://D1:8080,http://D2:8080
#   Every server must serve the same model file with the same KV settings (kv-dtype, kv-block):
#   the blocks' names include them, so a mismatch is refused block by block (the decode server
#   then computes the prompt itself: slower, the same bytes). Give every server the same
#   --kv-transport.
set -u
here=$(cd "$(dirname "$0")" && pwd)
V=${VERITY:-$(command -v verity || echo "$here/../../build/release/verity")}
logs=$(mktemp -d "${TMPDIR:-/tmp}/verity-disagg-XXXXXX")
pids=()
stop_all() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$logs"
}
trap stop_all EXIT
# start ROLE I: one server; appends its URL to the variable named ROLE_urls
pre_urls="" dec_urls=""
start() {
    local role=$1 i=$2 port="" log="$logs/$1$2.log"
    "$V" serve --port 0 --role "$role" "${@:3}" >"$log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 1200); do
        port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
        [ -n "$port" ] && break
        kill -0 "${pids[-1]}" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then
        echo "disagg_local.sh: $role server $i did not start: $(tail -n 1 "$log")" >&2
        exit 2
    fi
    echo "disagg_local.sh: $role server $i on http://127.0.0.1:$port" >&2
    if [ "$role" = prefill ]; then pre_urls="${pre_urls:+$pre_urls,}http://127.0.0.1:$port"
    else dec_urls="${dec_urls:+$dec_urls,}http://127.0.0.1:$port"; fi
}
for i in $(seq 1 "${PREFILL:-2}"); do start prefill "$i" "$@"; done
for i in $(seq 1 "${DECODE:-2}"); do start decode "$i" "$@"; done
# the router in the background, so this shell can pass SIGTERM/SIGINT on and wait for its drain
# shellcheck disable=SC2086
"$V" router --port "${ROUTER_PORT:-8080}" --prefill "$pre_urls" --decode "$dec_urls" ${ROUTER_ARGS:-} &
rpid=$!
trap 'kill -TERM "$rpid" 2>/dev/null' TERM INT
wait "$rpid"
st=$?
if kill -0 "$rpid" 2>/dev/null; then wait "$rpid"; st=$?; fi
exit "$st"
