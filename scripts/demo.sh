#!/usr/bin/env bash
# make demo: the main job on one machine (README.md).
#
# Three real slapd directories; the origin (front + LDAP core with mTLS and
# a pinned agent certificate); three edges on 127.0.0.2-4, each dialing the
# origin from its own address (`source`), one of which turns into a black
# hole; the embedded DNS server (fleet dns serve) publishing them (fleet
# apply). Then an agent on 127.0.0.10 ranks the edges (probe rank), binds
# and searches through the best one, the core's log line shows claimed vs
# measured, an edge is rotated out (fleet rotate) and the agent moves
# (probe watch). Runs until Ctrl-C; exits by itself when stdin is not a
# terminal or DEMO_EXIT=1. Run `make deps build` first (make demo does).
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
SLAPD=$(command -v slapd || echo /usr/sbin/slapd)
SLAPADD=$(command -v slapadd || echo /usr/sbin/slapadd)
SCHEMA=${SCHEMA:-/etc/ldap/schema}
BASE=${DEMO_PORT_BASE:-23000} # ports BASE+1 … BASE+12 on loopback
LDAP1=127.0.0.1:$((BASE + 1))
LDAP2=127.0.0.1:$((BASE + 2))
LDAP3=127.0.0.1:$((BASE + 3))
CORE=127.0.0.1:$((BASE + 4))
FRONT=127.0.0.1:$((BASE + 5))
PEERS=127.0.0.1:$((BASE + 6))
METRICS=127.0.0.1:$((BASE + 7))
EDGE_PORT=$((BASE + 8))         # every edge listens on its own IP, this port
EDGE_METRICS=$((BASE + 9))      # and serves /metrics on its own IP, this port
DNS=127.0.0.1:$((BASE + 10))    # UDP and TCP
AGENT=127.0.0.10                # the agent's own address
NAME=ldap.demo.test
SUFFIX=dc=example,dc=com

for b in "$SLAPD" "$SLAPADD" ldapsearch openssl "$BIN/origin" "$BIN/edge" "$BIN/fleet" "$BIN/probe"; do
	command -v "$b" >/dev/null || { echo "demo: $b not found (run: make deps build)" >&2; exit 1; }
done

DIR=$(mktemp -d -t edgefleet-demo.XXXXXX)
PIDS=()
declare -A EDGE_PID
CLEANED=0
cleanup() {
	# Once only, and not cut short by another Ctrl-C: $DIR always goes.
	[[ $CLEANED == 1 ]] && return
	CLEANED=1
	trap '' INT TERM
	# A stopped process only dies of SIGKILL or after SIGCONT.
	for p in "${PIDS[@]}" $(jobs -p); do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$DIR"
}
trap cleanup EXIT
# Ctrl-C stops at once, whatever runs (exit runs the EXIT trap, cleanup).
trap 'exit 130' INT
trap 'exit 0' TERM

# Bold headings on a terminal only: a log or CI capture stays plain text.
if [ -t 1 ]; then
	say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
	say() { printf '\n== %s\n' "$*"; }
fi

wait_tcp() { # host:port
	local rc
	for _ in $(seq 1 100); do
		# The subshell must die of a Ctrl-C rather than run the INT trap
		# itself: bash acts on SIGINT only when its foreground child died
		# of it, and a child that exits by itself would hide it.
		rc=0
		(trap - INT; exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null || rc=$?
		case $rc in
		0) return 0 ;;
		130) exit 130 ;;
		esac
		sleep 0.1
	done
	echo "demo: $1 is not accepting connections" >&2
	tail -n 5 "$DIR"/*.log "$DIR"/ldap*/log >&2 2>/dev/null || true
	return 1
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

say "certificates (a throwaway CA, the core's server certificate for $NAME, one agent certificate)"
cd "$DIR"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=demo-ca \
	-keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$NAME" \
	-keyout core.key -out core.csr 2>/dev/null
# ldapsearch dials an edge's IP and checks it against the certificate: the
# IPs are in it beside the name the probe verifies.
printf 'subjectAltName=DNS:%s,IP:127.0.0.2,IP:127.0.0.3,IP:127.0.0.4,IP:127.0.0.5\nextendedKeyUsage=serverAuth\n' "$NAME" >core.ext
openssl x509 -req -in core.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile core.ext -out core.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=agent-laptop-7 \
	-keyout agent.key -out agent.csr 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' >agent.ext
openssl x509 -req -in agent.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile agent.ext -out agent.pem 2>/dev/null
PIN=$(openssl x509 -in agent.pem -outform DER | sha256sum | cut -d' ' -f1)
echo "$PIN agent-laptop-7" >pins
echo "agent pin: $PIN agent-laptop-7"

say "three slapd directories: LDAP1 on $LDAP1, LDAP2 on $LDAP2, LDAP3 on $LDAP3"
{
	printf 'dn: %s\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n' "$SUFFIX"
	printf 'dn: ou=people,%s\nobjectClass: organizationalUnit\nou: people\n\n' "$SUFFIX"
	for u in alice bob carol; do
		printf 'dn: uid=%s,ou=people,%s\nobjectClass: inetOrgPerson\nuid: %s\ncn: %s\nsn: %s\nuserPassword: %s-pw\n\n' \
			"$u" "$SUFFIX" "$u" "$u" "$u" "$u"
	done
} >data.ldif
for i in 1 2 3; do
	mkdir -p "ldap$i/db"
	cat >"ldap$i/slapd.conf" <<EOF
include $SCHEMA/core.schema
include $SCHEMA/cosine.schema
include $SCHEMA/inetorgperson.schema
pidfile $DIR/ldap$i/slapd.pid
argsfile $DIR/ldap$i/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 104857600
suffix "$SUFFIX"
rootdn "cn=admin,$SUFFIX"
rootpw secret
directory $DIR/ldap$i/db
access to attrs=userPassword by anonymous auth by * none
access to * by * read
EOF
	"$SLAPADD" -q -f "ldap$i/slapd.conf" -l data.ldif
	addr_var="LDAP$i"
	"$SLAPD" -h "ldap://${!addr_var}/" -f "ldap$i/slapd.conf" -d 0 >"ldap$i/log" 2>&1 &
	PIDS+=($!)
done
wait_tcp "$LDAP1"
wait_tcp "$LDAP2"
wait_tcp "$LDAP3"

say "the origin: front on $FRONT (PROXY v2 from 127.0.0.0/8 trusted), LDAP core on $CORE (mTLS, pinned agents)"
cat >ldap_proxy.json <<EOF
// DLP file of the demo: everyone under ou=people is balanced over the
// three directories, with failover; anyone else goes to LDAP1 first.
[
  { "object": "Defaults", "ConnectTimeout": 3, "OfflineRetryTimeout": 60 },
  { "object": "LdapServer", "name": "LDAP1", "host": "127.0.0.1", "port": ${LDAP1##*:} },
  { "object": "LdapServer", "name": "LDAP2", "host": "127.0.0.1", "port": ${LDAP2##*:} },
  { "object": "LdapServer", "name": "LDAP3", "host": "127.0.0.1", "port": ${LDAP3##*:} },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "PEOPLE",
    "condition": "(user:node=ou=people,$SUFFIX)", "actions": [ "forwardto(LDAP1,LDAP2,LDAP3)" ],
    "loadbalance": 1, "failover": 1 },
  { "object": "LdapProxy", "name": "ldapConfiguration", "rules": [ "PEOPLE" ], "default": [ "LDAP1", "LDAP2", "LDAP3" ] }
]
EOF
cat >origin.yaml <<EOF
front:
  listen: ["$FRONT"]
  inner: $CORE
  trusted_edges: ["127.0.0.0/8"]
peers_api: $PEERS
metrics: $METRICS
log:
  format: text
core:
  listen: $CORE
  config: $DIR/ldap_proxy.json
  tls:
    mode: mtls
    cert: $DIR/core.pem
    key: $DIR/core.key
    pins: $DIR/pins
EOF
"$BIN/origin" --config origin.yaml >origin.log 2>&1 &
PIDS+=($!)
wait_tcp "$FRONT"
wait_tcp "$CORE"

# start_edge NAME IP: an edge listening on IP:EDGE_PORT that dials the
# front from IP (source), so the front measures IP for everything it relays.
start_edge() {
	cat >"$1.yaml" <<EOF
name: $1
listen: ["$2:$EDGE_PORT"]
origins: ["$FRONT"]
source: $2
metrics: $2:$EDGE_METRICS
log:
  format: text
EOF
	"$BIN/edge" --config "$1.yaml" >"$1.log" 2>&1 &
	PIDS+=($!)
	EDGE_PID[$1]=$!
	wait_tcp "$2:$EDGE_PORT"
}
say "three edges: edge-a on 127.0.0.2, edge-b on 127.0.0.3, edge-c on 127.0.0.4 (port $EDGE_PORT), each dialing the origin from its own address (source)"
start_edge edge-a 127.0.0.2
start_edge edge-b 127.0.0.3
start_edge edge-c 127.0.0.4

say "the embedded DNS server on $DNS (fleet dns serve): zone demo.test, TSIG-signed updates"
openssl rand -base64 32 >tsig.key
cat >fleet.yaml <<EOF
# The fleet of the demo: the A set of $NAME is the edge list.
name: $NAME
zone: demo.test
ttl: 2            # seconds; production: 60. The TTL is the floor on rotation speed.
drain_timeout: 5s
dns:
  server: "$DNS"
  tsig: {name: demo-key, algorithm: hmac-sha256, secret_file: tsig.key}
origin:
  ports: [${FRONT##*:}]
  address: 127.0.0.1
probe:            # how fleet reaches the origin through an edge, as an agent would
  ca: ca.pem
  cert: agent.pem
  key: agent.key
  port: $EDGE_PORT
  budget: 2s
watch:            # fleet watch: withdraw an edge after 3 failed checks in a row (docs/watch.md)
  interval: 1s    # production: 30s
  fall: 3
  rise: 2
edges:
  - {name: edge-a, ipv4: 127.0.0.2, metrics: "127.0.0.2:$EDGE_METRICS"}
  - {name: edge-b, ipv4: 127.0.0.3, metrics: "127.0.0.3:$EDGE_METRICS"}
  - {name: edge-c, ipv4: 127.0.0.4, metrics: "127.0.0.4:$EDGE_METRICS"}
EOF
"$BIN/fleet" --config fleet.yaml dns serve >dns.log 2>&1 &
PIDS+=($!)
wait_tcp "$DNS"

say "fleet apply: each edge probed end to end (TLS + one LDAP round trip through it), then published"
echo "(the firewall is not managed on loopback: --no-firewall; see docs/firewall.md)"
"$BIN/fleet" --config fleet.yaml apply --no-firewall --allow-loopback --slack 1s --yes
"$BIN/fleet" --config fleet.yaml dns list

say "edge-c turns into a black hole: its process hangs (SIGSTOP)"
echo "the kernel still completes TCP handshakes on 127.0.0.4:$EDGE_PORT, but nothing is forwarded;"
echo "DNS still lists it, as it would until an operator notices"
kill -STOP "${EDGE_PID[edge-c]}"

PROBE=("$BIN/probe" --name "$NAME" --port "$EDGE_PORT" --dns "$DNS" --ca ca.pem --cert agent.pem --key agent.key
	--state agent-edges.json --budget 2s --source "$AGENT")
say "the agent ($AGENT) ranks the edges: probe rank (every address in parallel, each within a 2s budget)"
printf '$ probe'; printf ' %q' "${PROBE[@]:1}" rank --format table; echo
t0=$(now_ms)
"${PROBE[@]}" rank --format table 2>>probe.log
echo "ranking took $(($(now_ms) - t0)) ms: one budget at most, however many black holes"
chosen() { grep -o '"chosen": *"[^"]*"' agent-edges.json | sed 's/.*"\([^"]*\)"$/\1/'; }
BEST=$(chosen)
[ -n "$BEST" ] || { echo "demo: the agent has no choice" >&2; cat agent-edges.json >&2; exit 1; }
echo "the agent's choice: $BEST"

# search [EDGE]: the agent's bind + search through an edge, from its own
# address (OpenLDAP's SOCKET_BIND_ADDRESSES, here from the environment).
search_cmd() {
	SEARCH=(env LDAPTLS_CACERT="$DIR/ca.pem" LDAPTLS_CERT="$DIR/agent.pem" LDAPTLS_KEY="$DIR/agent.key"
		LDAPTLS_REQCERT=demand LDAPSOCKET_BIND_ADDRESSES="$AGENT"
		ldapsearch -H "ldaps://$1" -o "ldif_wrap=no" -x -D "uid=alice,ou=people,$SUFFIX" -w alice-pw
		-b "ou=people,$SUFFIX" -LLL "(uid=bob)" cn)
}
core_lines() { grep 'msg="ldap op"' "$DIR/origin.log" | grep -E 'op=(bind|search)' || true; }
# wait_core N: until the core has logged more than N bind/search lines (its
# log lines reach the file within 100 ms; allow for a busy machine).
wait_core() {
	for _ in $(seq 1 50); do
		[ "$(core_lines | wc -l)" -gt "$1" ] && return 0
		sleep 0.1
	done
	echo "demo: no new core log line" >&2
	cat "$DIR/origin.log" >&2
	exit 1
}

say "the agent ($AGENT) binds and searches through $BEST (LDAPS with the agent certificate)"
search_cmd "$BEST"
printf '$'; printf ' %q' "${SEARCH[@]}"; echo
t0=$(now_ms)
"${SEARCH[@]}"
echo "bind + search took $(($(now_ms) - t0)) ms (ldapsearch, TLS handshake included)"

say "the core's log lines for it: claimed = the agent, measured = the edge that carried the bytes"
wait_core 1
core_lines
LINE=$(core_lines | tail -1)
CLAIMED=$(sed -n 's/.* claimed=\([^ ]*\).*/\1/p' <<<"$LINE")
MEASURED=$(sed -n 's/.* measured=\([^ ]*\).*/\1/p' <<<"$LINE")
echo "claimed  $CLAIMED  (from ${BEST%:*}'s PROXY v2 header: the agent's own socket)"
echo "measured $MEASURED  (the origin's socket: the edge's source address)"

say "the agent keeps watching: probe watch (re-measures when the address set changes)"
"${PROBE[@]}" watch --interval 1s >watch.log 2>watch.err &
PIDS+=($!)
sleep 1

OUT_EDGE=$(sed -n "s/.*name: \([^,]*\), ipv4: ${BEST%:*},.*/\1/p" fleet.yaml)
say "rotation: $OUT_EDGE (the agent's edge) is retired, edge-d on 127.0.0.5 replaces it: fleet rotate"
start_edge edge-d 127.0.0.5
ROTATE=(rotate --out "$OUT_EDGE" --in edge-d=127.0.0.5 --no-firewall --allow-loopback --slack 1s --progress 1s --yes)
printf '$ fleet'; printf ' %q' "${ROTATE[@]}"; echo
t0=$(now_ms)
"$BIN/fleet" --config fleet.yaml "${ROTATE[@]}"
echo "rotation took $(($(now_ms) - t0)) ms (most of it: TTL 2s + 1s slack for resolver caches, then the drain)"
"$BIN/fleet" --config fleet.yaml dns list
grep -n 'edge-d' fleet.yaml | sed 's/^/fleet.yaml:/'

say "the agent moves: probe watch's event"
for _ in $(seq 1 100); do
	grep -qE 'better-edge|edge-left' watch.log && break
	sleep 0.1
done
grep -E 'better-edge|edge-left' watch.log || { echo "demo: the watcher saw no move" >&2; cat watch.log watch.err >&2; exit 1; }
NEXT=$(chosen)
echo "the agent's choice now: $NEXT (was $BEST)"

say "the agent's next bind + search goes through $NEXT"
search_cmd "$NEXT"
BEFORE=$(core_lines | wc -l)
"${SEARCH[@]}"
wait_core $((BEFORE + 1))
LINE=$(core_lines | tail -1)
echo "$LINE"
echo "measured is now $(sed -n 's/.* measured=\([^ ]*\).*/\1/p' <<<"$LINE") (was $MEASURED): the agent moved"

say "fleet watch: every published edge checked end to end each round; edge-c, the black hole, still in DNS"
FWATCH=(watch --no-firewall --allow-loopback --slack 1s --progress 1s)
printf '$ fleet'; printf ' %q' "${FWATCH[@]}"; echo
t0=$(now_ms)
"$BIN/fleet" --config fleet.yaml "${FWATCH[@]}" >fleet-watch.log 2>&1 &
PIDS+=($!)
for _ in $(seq 1 600); do
	grep -q 'step 4/6 dns: remove A 127.0.0.4 (edge-c), read back' fleet-watch.log && break
	sleep 0.1
done
grep -E 'msg=withdraw|step 4/6' fleet-watch.log || { echo "demo: fleet watch withdrew nothing" >&2; cat fleet-watch.log >&2; exit 1; }
echo "edge-c withdrawn by fleet watch $(($(now_ms) - t0)) ms after it started: 3 failed checks in a row (each up to the 2s probe budget, a round every 1s: full jitter over the 1s interval, with its 1s floor), then one UPDATE; it stays in fleet.yaml. With the origin's firewall (not in this demo: --no-firewall) it would leave it one TTL plus slack and its drain later, and be let in again only for its rechecks (1s, then doubling up to 10 min) until 2 passed checks publish it again"
"$BIN/fleet" --config fleet.yaml dns list

say "the fleet at a glance: fleet status (edge-c, the black hole, is withdrawn: out of DNS, still in fleet.yaml)"
"$BIN/fleet" --config fleet.yaml status --no-firewall ||
	echo "(fleet status exits $? while a row is failed)"

say "try it by hand (the demo keeps running; Ctrl-C stops and cleans up)"
printf ' '; printf ' %q' "${SEARCH[@]}"; echo
echo "  rank again:  cd $DIR && ${PROBE[*]} rank"
echo "  the fleet:   cd $DIR && $BIN/fleet --config fleet.yaml status --no-firewall"
echo "  peers: curl -s http://$PEERS/peers   backends: curl -s http://$PEERS/backends"
echo "  logs: $DIR/origin.log $DIR/edge-*.log $DIR/watch.log $DIR/fleet-watch.log"

if [[ "${DEMO_EXIT:-0}" == 1 || ! -t 0 ]]; then
	say "not interactive (DEMO_EXIT=1 or stdin is not a terminal): stopping"
	exit 0
fi
# wait (unlike a foreground sleep) returns as soon as a signal arrives, so
# the cleanup also runs for a SIGTERM sent to this script alone.
while true; do
	sleep 3600 &
	wait $!
done
