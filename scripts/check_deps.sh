#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# check_deps: the dependency rule of docs/architecture.md, checked. Reads every `#include "x/..."`
# line of SRC/**/*.c and *.h (SRC defaults to src; tests give a planted tree) and fails on any
# include that is not allowed, naming the file, the line and the edge. An include is allowed when
# it stays inside its own folder, points to a lower tier, or is one of the sideways edges named
# below; hunt and router include base only (the router also the server's HTTP layer, named below). Prints nothing and exits 0 when all are allowed, else
# one line per offending include and exits 1 (2 for a usage error).
set -u
src=${1:-src}
[ -d "$src" ] || { echo "check_deps: no directory $src" >&2; exit 2; }

# Tiers, top (6) to bottom (1); see docs/architecture.md.
declare -A tier=(
    [cli]=6
    [server]=5 [router]=5 [hunt]=5 [disagg]=5
    [engine]=4
    [model]=3 [kv]=3 [spec]=3 [sample]=3 [template]=3 [toolcall]=3 [tokenizer]=3
    [kernels]=2 [gguf]=2
    [base]=1
)
# Folders that depend on base alone (they speak HTTP to servers).
declare -A base_only=([hunt]=1 [router]=1)
# Sideways edges inside a tier: "from -> to" (a folder) or "from -> to/file.h" (that header only).
sideways=(
    "model -> kv"                     # forward() writes the KV pool's blocks
    "sample -> tokenizer"             # grammars match token texts (grammar_vocab)
    "template -> tokenizer"           # chat_prompt: the rendered prompt to token ids
    "toolcall -> sample"              # tool_grammar builds sample/grammar ASTs
    "spec -> model"                   # the draft drafter runs a second model's forward pass
    "spec -> kv/kv_pool.h"            # ... over its own KV pool (blocks only, no prefix cache)
    "gguf -> kernels/kn_type_table.h" # the one type-size table lives in kernels
    "router -> server/srv_http.h"     # the router serves clients on the server's HTTP layer
    "server -> disagg/disagg.h"       # a request's KV transfer (prefill/decode roles)
)

allowed() { # from to header
    local from=$1 to=$2 hdr=$3 e
    [ "$from" = "$to" ] && return 0
    [ -n "${tier[$to]:-}" ] || return 1
    for e in "${sideways[@]}"; do
        [ "$e" = "$from -> $to" ] || [ "$e" = "$from -> $hdr" ] && return 0
    done
    if [ -n "${base_only[$from]:-}" ]; then [ "$to" = base ]; return; fi
    [ "${tier[$to]}" -lt "${tier[$from]}" ] && return 0
    for e in "${sideways[@]}"; do
        [ "$e" = "$from -> $to" ] || [ "$e" = "$from -> $hdr" ] && return 0
    done
    return 1
}

bad=0
while IFS= read -r -d '' f; do
    rel=${f#"$src"/}
    from=${rel%%/*}
    if [ -z "${tier[$from]:-}" ]; then
        echo "check_deps: $f: folder '$from' has no tier in scripts/check_deps.sh"
        bad=1
        continue
    fi
    while IFS= read -r line; do
        n=${line%%:*} line=${line#*:}
        [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([a-z0-9_]+)/([^\"]+)\" ]] || continue
        to=${BASH_REMATCH[1]} hdr="${BASH_REMATCH[1]}/${BASH_REMATCH[2]}"
        if ! allowed "$from" "$to" "$hdr"; then
            echo "check_deps: $f:$n: $from -> $to (#include \"$hdr\") is not an allowed edge"
            bad=1
        fi
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z0-9_]+/' "$f")
done < <(find "$src" -mindepth 2 -type f \( -name '*.c' -o -name '*.h' \) -print0 | sort -z)
exit $bad
