#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what verity needs from Debian 12 packages, only what is missing, then builds.
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

# package -> a file or command that shows it is present
need=(
  "build-essential:/usr/bin/gcc"
  "make:/usr/bin/make"
  "clang:/usr/bin/clang"
  "libclang-rt-14-dev:/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a"
  "python3:/usr/bin/python3"
  "libpcre2-dev:/usr/include/pcre2.h"
  "curl:/usr/bin/curl"
  "prometheus:/usr/bin/promtool"
  "nodejs:/usr/bin/node"
  "npm:/usr/bin/npm"
  "libcurl4-openssl-dev:/usr/include/x86_64-linux-gnu/curl/curl.h"
  "chromium:/usr/bin/chromium"
  "libxxhash-dev:/usr/include/xxhash.h"
  "libhiredis-dev:/usr/include/hiredis/hiredis.h"
  "redis-server:/usr/bin/redis-server"
  "redis-tools:/usr/bin/redis-benchmark"
  "libucx-dev:/usr/include/ucp/api/ucp.h"
)
missing=()
for entry in "${need[@]}"; do
  pkg=${entry%%:*} probe=${entry#*:}
  if [ ! -e "$probe" ] && ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present" >&2
fi

if [ "${1:-}" != "--no-build" ]; then
  make -j"$(nproc)" TYPE=release
fi
