# activate ROOT SHA: switch an edge host to the binary edge-SHA and the
# configuration and unit that fleet deploy push uploaded beside their
# places (*.new), then restart the service. ROOT prefixes every path ("" in
# production). Exit 3: the new binary refused the new configuration and
# nothing the running edge uses was touched. Exit 4: the restart failed and
# the previous binary, configuration and unit were put back; the last line
# on stderr says why (systemctl's error and the unit's last log line).
# Exit 0 with "unchanged" when the host already runs exactly these files:
# no restart, which would cut every connection the edge holds.
set -eu
root=$1 sha=$2
lib=$root/usr/local/lib/edgefleet
link=$root/usr/local/bin/edgefleet-edge
conf=$root/etc/edgefleet/edge.yaml
unit=$root/etc/systemd/system/edgefleet-edge.service
bin=$lib/edge-$sha
new=$lib/.edge-$sha.new
[ -f "$new" ] || new=$bin # the binary was already installed

if ! out=$("$new" --check --config "$conf.new" 2>&1); then
	rm -f "$lib/.edge-$sha.new" "$conf.new" "$unit.new"
	echo "$out" | tail -n 1 >&2
	exit 3
fi

prev=$(readlink "$link" 2>/dev/null || true)
same() { [ -f "$2" ] && [ "$(sha256sum <"$1")" = "$(sha256sum <"$2")" ]; }
if [ "$prev" = "../lib/edgefleet/edge-$sha" ] && same "$conf.new" "$conf" && same "$unit.new" "$unit" &&
	systemctl is-active --quiet edgefleet-edge.service; then
	rm -f "$lib/.edge-$sha.new" "$conf.new" "$unit.new"
	echo "unchanged edge-$sha"
	exit 0
fi
prev=${prev##*/}
# Prepare everything, then three renames: the configuration, the unit and
# the link.
mkdir -p "${link%/*}"
[ "$new" = "$bin" ] || mv -f "$new" "$bin"
for f in "$conf" "$unit"; do
	if [ -f "$f" ]; then ln -f "$f" "$f.prev"; else rm -f "$f.prev"; fi
done
ln -sfn "../lib/edgefleet/edge-$sha" "$link.new"
mv -f "$conf.new" "$conf"
mv -f "$unit.new" "$unit"
mv -fT "$link.new" "$link"
sync "$lib" "${link%/*}" "${conf%/*}" "${unit%/*}"

# restart runs daemon-reload and restart, and on failure sets why: the
# last line systemctl printed and the unit's last log line (what the edge
# or its ExecStartPre said), on one line.
restart() {
	if out=$({ systemctl daemon-reload && systemctl restart edgefleet-edge.service; } 2>&1); then
		return 0
	fi
	why=$(printf '%s\n' "$out" | sed '/^[[:space:]]*$/d' | tail -n 1)
	if command -v journalctl >/dev/null 2>&1; then
		last=$(journalctl -u edgefleet-edge.service -n 1 -o cat --no-pager 2>/dev/null | tail -n 1 || true)
		[ -z "$last" ] || why="$why; the unit's last log line: $last"
	fi
	return 1
}

if ! restart; then
	first=$why
	if [ -z "$prev" ]; then
		echo "restart failed ($first); there is no previous version to roll back to" >&2
		exit 4
	fi
	ln -sfn "../lib/edgefleet/$prev" "$link.new"
	mv -fT "$link.new" "$link"
	for f in "$conf" "$unit"; do
		if [ -f "$f.prev" ]; then mv -f "$f.prev" "$f"; fi
	done
	sync "${link%/*}" "${conf%/*}" "${unit%/*}"
	if restart; then
		echo "restart failed ($first); rolled back to $prev" >&2
	else
		echo "restart failed ($first); rolled back to $prev, which failed to restart too ($why)" >&2
	fi
	exit 4
fi

# Keep the running and the previous binary for a rollback by hand.
for f in "$lib"/edge-*; do
	case ${f##*/} in
	"edge-$sha" | "$prev") ;;
	*) rm -f "$f" ;;
	esac
done
echo "installed edge-$sha"
echo "previous ${prev:-none}"
