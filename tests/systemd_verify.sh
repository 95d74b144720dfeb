#!/bin/sh
# systemd_verify.sh - check systemd/kcsd.service with `systemd-analyze verify`.
#
# Usage: systemd_verify.sh UNIT_FILE [EXECUTABLE]
# The unit names /usr/local/bin/kcsd, which need not exist on a build
# machine, so a copy in a temporary directory gets ExecStart= rewritten to
# EXECUTABLE (the built kcsd, or /bin/true when it is absent). Prints a TAP
# "# SKIP" line and exits 0 where systemd-analyze is not installed.
set -eu

unit=$1
exe=${2:-/bin/true}
[ -x "$exe" ] || exe=/bin/true

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "1..0 # SKIP systemd-analyze not installed"
	exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kcsd-unit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
sed "s|^ExecStart=/usr/local/bin/kcsd|ExecStart=$exe|" "$unit" >"$tmp/kcsd.service"
grep -q "^ExecStart=$exe " "$tmp/kcsd.service" || {
	echo "not ok 1 - ExecStart=/usr/local/bin/kcsd not found in $unit"
	exit 1
}
if out=$(systemd-analyze verify "$tmp/kcsd.service" 2>&1) && [ -z "$out" ]; then
	echo "ok 1 - systemd-analyze verify kcsd.service"
	exit 0
fi
echo "not ok 1 - systemd-analyze verify kcsd.service"
printf '%s\n' "$out" | sed 's/^/# /'
exit 1
