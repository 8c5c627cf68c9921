# SPDX-License-Identifier: MIT
# Helpers for the CLI test scripts: each script sources this, runs cases, and prints one line per
# case (PASS name / FAIL name: why / SKIP name: reason) as tests/run.sh expects.
# $VERITY is the binary under test; $SHARED the shared data directory.
set -u
SHARED=${VERITY_SHARED:-../shared}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/verity-cli-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
skip() { echo "SKIP $1: $2"; }
# need_shared NAME FILE: returns 1 (after printing SKIP) if FILE is missing
need_shared() {
    if [ ! -e "$SHARED/$2" ]; then skip "$1" "$SHARED/$2 not found (shared data missing)"; return 1; fi
    return 0
}
# expect_exit2 NAME CMD...: the command must exit 2 with exactly one line on stderr
expect_exit2() {
    local name=$1; shift
    local err rc
    err=$("$@" 2>&1 >"$TMP/stdout.$$")
    rc=$?
    local lines; lines=$(printf '%s' "$err" | grep -c '' || true)
    if [ $rc -ne 2 ]; then fail "$name" "exit code $rc, expected 2 (stderr: $err)"
    elif [ "$lines" -ne 1 ]; then fail "$name" "expected one line on stderr, got $lines: $err"
    else pass "$name"; fi
}
