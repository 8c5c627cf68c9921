#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The dependency rule (docs/architecture.md, scripts/check_deps.sh): the tree passes it, and a
# copy of the tree with a planted upward include (kernels -> engine), a planted include from hunt
# to anything but base, a planted include from router to a server header other than srv_http.h, and a planted sideways include that is not named (kv -> model) fails it,
# naming each file, line and edge. Prints PASS/FAIL lines; needs no build.
set -u
cd "$(dirname "$0")/../.." || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$(scripts/check_deps.sh src 2>&1)
rc=$?
if [ $rc -eq 0 ] && [ -z "$out" ]; then
    echo "PASS check_deps"
else
    echo "FAIL check_deps: exit $rc: $(head -c 2000 <<<"$out" | tr '\n' ' ')"
fi

cp -r src "$tmp/src"
plant() { # file include: appends the include, prints the line number it landed on
    echo "#include \"$2\"" >>"$tmp/src/$1"
    wc -l <"$tmp/src/$1"
}
l1=$(plant kernels/kn_ops.c engine/engine.h)
l2=$(plant hunt/hunt_stats.c tokenizer/tokenizer.h)
l3=$(plant kv/kv_pool.h model/model.h)
l4=$(plant router/router.c server/server.h)
out=$(scripts/check_deps.sh "$tmp/src" 2>&1)
rc=$?
want=("$tmp/src/kernels/kn_ops.c:$l1: kernels -> engine"
      "$tmp/src/hunt/hunt_stats.c:$l2: hunt -> tokenizer"
      "$tmp/src/kv/kv_pool.h:$l3: kv -> model"
      "$tmp/src/router/router.c:$l4: router -> server")
missing=""
for w in "${want[@]}"; do
    grep -qF "check_deps: $w " <<<"$out" || missing="$missing [$w]"
done
n=$(grep -c '^check_deps: ' <<<"$out")
if [ $rc -eq 1 ] && [ -z "$missing" ] && [ "$n" -eq 4 ]; then
    echo "PASS check_deps.planted"
else
    echo "FAIL check_deps.planted: exit $rc, $n lines, missing:$missing; got: $(head -c 1500 <<<"$out" | tr '\n' ' ')"
fi
