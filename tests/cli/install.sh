#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# make install / make uninstall into a temporary DESTDIR, for the build type under test
# ($VERITY_BUILD's name): the binary, verity(1), the Grafana dashboard, the systemd unit and the
# example environment file are installed where they belong; the man page renders and names every
# command of `verity --help` and every toggle of `verity flags --json`; uninstall leaves no file.
# make installs the existing build/<type> (it runs in the repository root) and never builds another
# type.
. "$(dirname "$0")/lib.bash"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${VERITY_BUILD:-$(dirname "$VERITY")}
TYPE=$(basename "$BUILD")
if [ "$(cd "$BUILD" 2>/dev/null && pwd)" != "$ROOT/build/$TYPE" ]; then
    skip install.make_install "$BUILD is not $ROOT/build/$TYPE"; exit 0
fi
DEST="$TMP/root"
if ! make -C "$ROOT" --no-print-directory TYPE="$TYPE" DESTDIR="$DEST" PREFIX=/usr install >"$TMP/install.log" 2>&1; then
    fail install.make_install "$(tail -n 5 "$TMP/install.log")"; exit 0
fi
pass install.make_install

# every file, in its place, with its content
bad=""
[ -x "$DEST/usr/bin/verity" ] && cmp -s "$DEST/usr/bin/verity" "$BUILD/verity" || bad+=" bin/verity"
cmp -s "$DEST/usr/share/man/man1/verity.1" "$BUILD/verity.1" || bad+=" man1/verity.1"
cmp -s "$DEST/usr/share/verity/grafana/verity.json" "$ROOT/contrib/grafana/verity.json" || bad+=" grafana/verity.json"
cmp -s "$DEST/usr/share/verity/verity.env.example" "$ROOT/contrib/systemd/verity.env.example" || bad+=" verity.env.example"
unit="$DEST/usr/lib/systemd/system/verity.service"
grep -qx 'ExecStart=/usr/bin/verity serve' "$unit" 2>/dev/null &&
    grep -qx 'EnvironmentFile=-/etc/verity/verity.env' "$unit" || bad+=" verity.service"
n=$(find "$DEST" -type f | wc -l)
[ -z "$bad" ] && [ "$n" -eq 5 ] && pass install.files_in_place ||
    fail install.files_in_place "wrong or missing:${bad:- none}; $n files: $(find "$DEST" -type f | tr '\n' ' ')"

# every VERITY_* toggle is in the example environment file
miss=$("$VERITY" flags --json | python3 -c '
import json, sys
text = open(sys.argv[1]).read()
print(" ".join(f["env"] for f in json.load(sys.stdin) if not f["name"].startswith("fault-") and "#" + f["env"] + "=" not in text))' "$DEST/usr/share/verity/verity.env.example")
[ -z "$miss" ] && pass install.env_example_lists_every_toggle || fail install.env_example_lists_every_toggle "missing: $miss"

# the man page renders without warnings, and names every command and every toggle
man1="$DEST/usr/share/man/man1/verity.1"
if command -v groff >/dev/null; then
    groff -man -Tascii -ww -P-cbou "$man1" >"$TMP/man.txt" 2>"$TMP/man.err"
    how=groff
elif command -v man >/dev/null; then
    MANWIDTH=100 MAN_KEEP_FORMATTING=0 man -l "$man1" 2>"$TMP/man.err" | col -b >"$TMP/man.txt"
    how=man
else
    sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' "$man1" >"$TMP/man.txt"; : >"$TMP/man.err"
    how=grep
fi
if [ -s "$TMP/man.txt" ] && [ ! -s "$TMP/man.err" ] && grep -q '^NAME' "$TMP/man.txt" && grep -q 'OPTIONS' "$TMP/man.txt"; then
    pass "install.man_page_renders($how)"
else
    fail install.man_page_renders "$how: $(head -c 300 "$TMP/man.err")"
fi
miss=$("$VERITY" flags --json | python3 -c '
import json, sys
text = open(sys.argv[1]).read()
print(" ".join(f["name"] for f in json.load(sys.stdin) if "--" + f["name"] not in text or f["env"] not in text))' "$TMP/man.txt")
[ -z "$miss" ] && pass install.man_page_lists_every_flag || fail install.man_page_lists_every_flag "missing: $miss"
miss=""
for c in $("$VERITY" --help | awk '/^commands:/ { on = 1; next } on && NF { print $1 }'); do
    grep -qE "^ {5,}$c\$|^ {5,}$c " "$TMP/man.txt" || miss+=" $c"
done
[ -z "$miss" ] && pass install.man_page_lists_every_command || fail install.man_page_lists_every_command "missing:$miss"

# uninstall removes exactly what install put there
if make -C "$ROOT" --no-print-directory TYPE="$TYPE" DESTDIR="$DEST" PREFIX=/usr uninstall >"$TMP/uninstall.log" 2>&1; then
    left=$(find "$DEST" ! -type d)
    [ -z "$left" ] && pass install.uninstall_leaves_no_file || fail install.uninstall_leaves_no_file "left: $(echo $left)"
else
    fail install.uninstall_leaves_no_file "$(tail -n 5 "$TMP/uninstall.log")"
fi
