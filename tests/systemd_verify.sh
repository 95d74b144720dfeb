#!/bin/sh
# systemd_verify.sh - check systemd/kcsd.service with `systemd-analyze verify`,
# and that `systemd-analyze security --offline=yes` rates its exposure at
# most MAX_EXPOSURE (1.4: what the unit scored before the compile workers
# and their sandbox, which must not cost the unit's own hardening).
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
rc=0
if out=$(systemd-analyze verify "$tmp/kcsd.service" 2>&1) && [ -z "$out" ]; then
	echo "ok 1 - systemd-analyze verify kcsd.service"
else
	echo "not ok 1 - systemd-analyze verify kcsd.service"
	printf '%s\n' "$out" | sed 's/^/# /'
	rc=1
fi

MAX_EXPOSURE=1.4
sec=$(systemd-analyze security --offline=yes "$tmp/kcsd.service" 2>&1 || true)
level=$(printf '%s\n' "$sec" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
if [ -z "$level" ]; then
	echo "ok 2 - exposure level # SKIP this systemd-analyze has no security --offline"
elif awk -v l="$level" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(l <= m) }'; then
	echo "ok 2 - systemd-analyze security --offline=yes: exposure $level <= $MAX_EXPOSURE"
else
	echo "not ok 2 - systemd-analyze security --offline=yes: exposure $level > $MAX_EXPOSURE"
	printf '%s\n' "$sec" | grep '✗' | sed 's/^/# /'
	rc=1
fi
echo "1..2"
exit $rc
