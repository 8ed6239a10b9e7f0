#!/usr/bin/env bash
# make demo: the main job on one machine.
#
# Two real slapd directories, the origin (front + LDAP core with mTLS and a
# pinned agent certificate), two edges on 127.0.0.2 and 127.0.0.3, and an
# ldapsearch through one edge; then the core's log line for it, showing the
# address the edge claims for the client next to the address the origin
# measured. Runs until Ctrl-C; exits by itself when stdin is not a terminal
# or DEMO_EXIT=1. Run `make deps build` first (make demo does).
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
SLAPD=$(command -v slapd || echo /usr/sbin/slapd)
SLAPADD=$(command -v slapadd || echo /usr/sbin/slapadd)
SCHEMA=${SCHEMA:-/etc/ldap/schema}
BASE=${DEMO_PORT_BASE:-23000}   # ports BASE+1 … BASE+9 on loopback
LDAP1=127.0.0.1:$((BASE + 1))
LDAP2=127.0.0.1:$((BASE + 2))
CORE=127.0.0.1:$((BASE + 3))
FRONT=127.0.0.1:$((BASE + 4))
PEERS=127.0.0.1:$((BASE + 5))
METRICS=127.0.0.1:$((BASE + 6))
EDGE_PORT=$((BASE + 7))
SUFFIX=dc=example,dc=com

for b in "$SLAPD" "$SLAPADD" ldapsearch openssl "$BIN/origin" "$BIN/edge"; do
	command -v "$b" >/dev/null || { echo "demo: $b not found (run: make deps build)" >&2; exit 1; }
done

DIR=$(mktemp -d -t edgefleet-demo.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}" $(jobs -p); do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

# Bold headings on a terminal only: a log or CI capture stays plain text.
if [ -t 1 ]; then
	say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
	say() { printf '\n== %s\n' "$*"; }
fi

wait_tcp() { # host:port
	for _ in $(seq 1 100); do
		if (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "demo: $1 is not accepting connections" >&2
	tail -n 5 "$DIR"/*.log "$DIR"/ldap*/log >&2 2>/dev/null || true
	return 1
}

say "certificates (a throwaway CA, the core's server certificate, one agent certificate)"
cd "$DIR"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=demo-ca \
	-keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
	-keyout core.key -out core.csr 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:127.0.0.2,IP:127.0.0.3\nextendedKeyUsage=serverAuth\n' >core.ext
openssl x509 -req -in core.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile core.ext -out core.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=agent-laptop-7 \
	-keyout agent.key -out agent.csr 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' >agent.ext
openssl x509 -req -in agent.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile agent.ext -out agent.pem 2>/dev/null
PIN=$(openssl x509 -in agent.pem -outform DER | sha256sum | cut -d' ' -f1)
echo "$PIN agent-laptop-7" >pins
echo "agent pin: $PIN agent-laptop-7"

say "two slapd directories: LDAP1 on $LDAP1, LDAP2 on $LDAP2"
{
	printf 'dn: %s\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n' "$SUFFIX"
	printf 'dn: ou=people,%s\nobjectClass: organizationalUnit\nou: people\n\n' "$SUFFIX"
	for u in alice bob carol; do
		printf 'dn: uid=%s,ou=people,%s\nobjectClass: inetOrgPerson\nuid: %s\ncn: %s\nsn: %s\nuserPassword: %s-pw\n\n' \
			"$u" "$SUFFIX" "$u" "$u" "$u" "$u"
	done
} >data.ldif
for i in 1 2; do
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

say "the origin: front on $FRONT (PROXY v2 from 127.0.0.0/8 trusted), LDAP core on $CORE (mTLS, pinned agents)"
cat >ldap_proxy.json <<EOF
// DLP file of the demo: everyone under ou=people is balanced over both
// directories, with failover; anyone else goes to LDAP1.
[
  { "object": "Defaults", "ConnectTimeout": 3, "OfflineRetryTimeout": 60 },
  { "object": "LdapServer", "name": "LDAP1", "host": "127.0.0.1", "port": ${LDAP1##*:} },
  { "object": "LdapServer", "name": "LDAP2", "host": "127.0.0.1", "port": ${LDAP2##*:} },
  { "object": "ProxyRule", "ruleType": "UserRouting", "name": "PEOPLE",
    "condition": "(user:node=ou=people,$SUFFIX)", "actions": [ "forwardto(LDAP1,LDAP2)" ],
    "loadbalance": 1, "failover": 1 },
  { "object": "LdapProxy", "name": "ldapConfiguration", "rules": [ "PEOPLE" ], "default": [ "LDAP1", "LDAP2" ] }
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

say "two edges: edge-a on 127.0.0.2:$EDGE_PORT, edge-b on 127.0.0.3:$EDGE_PORT"
for e in a:127.0.0.2 b:127.0.0.3; do
	name=edge-${e%%:*} ip=${e#*:}
	cat >"$name.yaml" <<EOF
name: $name
listen: ["$ip:$EDGE_PORT"]
origins: ["$FRONT"]
metrics: ""
EOF
	"$BIN/edge" --config "$name.yaml" >"$name.log" 2>&1 &
	PIDS+=($!)
	wait_tcp "$ip:$EDGE_PORT"
done

SEARCH=(env LDAPTLS_CACERT="$DIR/ca.pem" LDAPTLS_CERT="$DIR/agent.pem" LDAPTLS_KEY="$DIR/agent.key"
	ldapsearch -H "ldaps://127.0.0.2:$EDGE_PORT" -x -D "uid=alice,ou=people,$SUFFIX" -w alice-pw
	-b "ou=people,$SUFFIX" -LLL "(uid=bob)" cn)
say "an agent's ldapsearch through edge-a (LDAPS with the agent certificate)"
printf '$'; printf ' %q' "${SEARCH[@]}"; echo
"${SEARCH[@]}"

say "the core's log lines for it"
echo "claimed  = the agent's address as edge-a saw it (from edge-a's PROXY v2 header)"
echo "measured = the address the origin's socket saw: edge-a's own connection"
echo "(on loopback every source address is 127.0.0.1, so only the ports differ; on a network they are two hosts)"
sleep 0.3
grep 'msg="ldap op"' origin.log | grep -E 'op=(bind|search)' || { echo "demo: no core log line" >&2; cat origin.log; exit 1; }
say "the front's line for the same connection"
grep -E 'claimed=' origin.log | grep -v 'msg="ldap op"' | tail -1 || true

say "try it by hand (the demo keeps running; Ctrl-C stops and cleans up)"
printf ' '; printf ' %q' "${SEARCH[@]}"; echo
echo "  or through edge-b: replace 127.0.0.2 with 127.0.0.3"
echo "  peers: curl -s http://$PEERS/peers   backends: curl -s http://$PEERS/backends"
echo "  logs: $DIR/origin.log"

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
