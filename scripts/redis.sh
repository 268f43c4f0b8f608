#!/usr/bin/env bash
# Start and stop the Redis servers the tests use (developers and CI).
#
# A developer runs the tests with:
#
#   scripts/redis.sh start /tmp/kvtier-redis && . /tmp/kvtier-redis/env && go test ./... ; scripts/redis.sh stop /tmp/kvtier-redis
#
# Subcommands:
#   install    apt-get install -y redis-server openssl (apt-get update first
#              only if that fails); skipped when redis-server, redis-cli and
#              openssl are on PATH.
#   start DIR  starts, on 127.0.0.1 only, each on a free port (never 6379):
#                - one standalone redis-server;
#                - another standalone redis-server, for the one test that
#                  kills a server mid-run (so that tests running meanwhile
#                  in other packages, on the first one, never see it die);
#                - a Redis Cluster of 3 masters (no replicas);
#                - one standalone redis-server that speaks only TLS and
#                  requires a client certificate (mutual TLS), with a CA,
#                  a server certificate (IP SAN 127.0.0.1) and a client
#                  certificate made by openssl under DIR/certs.
#              Every file (config, data, log, pid) is under DIR. No persistence
#              (save "", appendonly no); maxmemory 1gb, allkeys-lru on each.
#              Waits until every server answers PING and every cluster node
#              reports cluster_state:ok, then writes DIR/env and prints it:
#                KVTIER_REDIS_ADDR            standalone server, 127.0.0.1:PORT
#                KVTIER_REDIS_CLUSTER_ADDRS   the 3 masters, comma separated
#                KVTIER_REDIS_KILLABLE_ADDR   the server to kill, 127.0.0.1:PORT
#                KVTIER_REDIS_KILLABLE_PIDFILE its pid file
#                KVTIER_REDIS_TLS_ADDR        TLS server, 127.0.0.1:PORT
#                KVTIER_REDIS_TLS_CA          PEM file of the CA that signed both
#                                             certificates
#                KVTIER_REDIS_TLS_CERT        PEM file of the client certificate
#                KVTIER_REDIS_TLS_KEY         PEM file of its private key
#                KVTIER_REDIS_KILLABLE_CMD    command that restarts it on the same
#                                             port with the same config. Every
#                                             server runs with "daemonize yes":
#                                             the command returns at once (before
#                                             the server accepts connections, so
#                                             poll with PING) and the server
#                                             rewrites the pid file.
#              A test can kill that server by the PID in the pid file and
#              bring it back with: sh -c "$KVTIER_REDIS_KILLABLE_CMD".
#   stop DIR   stops every server started in DIR (SIGTERM, up to 5 s, then
#              SIGKILL). Idempotent: never fails if they are already stopped.
#
# Free ports: the kernel is not asked for a port (that needs more than bash);
# the script picks a random port in 20000-29999 (below Linux's ephemeral range
# 32768-60999, so outgoing connections rarely take it), checks with a bash
# /dev/tcp connect that nothing listens there (nor on port+10000, the cluster
# bus), starts the server, and checks the server that answers on the port is
# the one it started (INFO's process_id against the pid file). If the bind
# failed (another process took the port meanwhile), it tries another port, up
# to 20 times per server. Needs only bash, coreutils, redis-server, redis-cli
# and openssl.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

# The port range can be moved with REDIS_SH_PORT_MIN and REDIS_SH_PORT_SPAN
# (PORT_MIN + PORT_SPAN + 10000 must stay below 65536).
PORT_MIN=${REDIS_SH_PORT_MIN:-20000}
PORT_SPAN=${REDIS_SH_PORT_SPAN:-10000}
START_TRIES=20
WAIT_TENTHS=100 # 10 s, in steps of 0.1 s

die() { echo "redis.sh: $*" >&2; exit 1; }

# TLS_CLI holds redis-cli's TLS flags while a TLS server is launched.
TLS_CLI=()

cli() { # cli PORT ARGS...: redis-cli that cannot hang
  local port=$1; shift
  timeout 2 redis-cli "${TLS_CLI[@]}" -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
}

listening() { # listening PORT: true if something accepts connections there
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

random_port() {
  local p
  while :; do
    p=$(( PORT_MIN + (RANDOM * 32768 + RANDOM) % PORT_SPAN ))
    [ "$p" -ne 6379 ] || continue
    listening "$p" && continue
    listening $(( p + 10000 )) && continue # cluster bus port
    echo "$p"; return
  done
}

is_redis_pid() { # is_redis_pid PID: alive and a redis-server (not a reused PID)
  local pid=$1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  local stat comm
  read -r stat comm < <(ps -o stat=,comm= -p "$pid" 2>/dev/null) || return 1
  # A killed daemon whose parent (PID 1 in some containers) has not reaped it
  # yet is a zombie: it answers kill -0 but is gone.
  [ "${stat#Z}" = "$stat" ] && [ "$comm" = redis-server ]
}

pid_of() { # pid_of PIDFILE: the pid in it, or nothing
  [ -s "$1" ] && tr -dc '0-9' <"$1" || true
}

stop_pidfile() { # stop_pidfile PIDFILE
  local pidfile=$1 pid i
  pid=$(pid_of "$pidfile")
  if [ -n "$pid" ] && is_redis_pid "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for (( i = 0; i < 50; i++ )); do
      is_redis_pid "$pid" || break
      sleep 0.1
    done
    if is_redis_pid "$pid"; then
      echo "redis.sh: pid $pid ($pidfile) ignored SIGTERM for 5 s, sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      for (( i = 0; i < 20; i++ )); do
        is_redis_pid "$pid" || break
        sleep 0.1
      done
    fi
    echo "stopped redis-server pid $pid ($pidfile)"
  fi
  rm -f "$pidfile"
}

write_conf() { # write_conf CONF PORT NODEDIR MODE(plain|cluster|tls)
  local conf=$1 port=$2 dir=$3 mode=$4
  mkdir -p "$dir"
  local listen="port $port"
  if [ "$mode" = tls ]; then
    # TLS only: no plain port, and a client must show a certificate the
    # CA signed.
    listen="port 0
tls-port $port
tls-cert-file $DIR/certs/server.crt
tls-key-file $DIR/certs/server.key
tls-ca-cert-file $DIR/certs/ca.crt
tls-auth-clients yes"
  fi
  cat >"$conf" <<EOF
# Written by scripts/redis.sh. Restart with: redis-server $conf
bind 127.0.0.1
$listen
protected-mode yes
daemonize yes
pidfile $dir/redis.pid
logfile $dir/redis.log
dir $dir
save ""
appendonly no
maxmemory 1gb
maxmemory-policy allkeys-lru
EOF
  if [ "$mode" = cluster ]; then
    cat >>"$conf" <<EOF
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 5000
EOF
  fi
}

# launch NAME MODE(plain|cluster|tls): starts a server in $DIR/NAME on a
# free port, retrying on another port if the bind fails; prints the port.
launch() {
  local name=$1 mode=$2 try port conf dir pid i
  dir=$DIR/$name
  conf=$DIR/$name.conf
  for (( try = 1; try <= START_TRIES; try++ )); do
    port=$(random_port)
    rm -rf "$dir"
    write_conf "$conf" "$port" "$dir" "$mode"
    redis-server "$conf" >/dev/null 2>&1 || true
    # Daemonized: the pid file appears once the server has bound its port.
    for (( i = 0; i < WAIT_TENTHS; i++ )); do
      pid=$(pid_of "$dir/redis.pid")
      if [ -n "$pid" ] && is_redis_pid "$pid" &&
         [ "$(cli "$port" PING)" = PONG ] &&
         cli "$port" INFO server | tr -d '\r' | grep -qx "process_id:$pid"; then
        echo "$port"; return 0
      fi
      # Gave up (bind failed): its log says why; try another port.
      if grep -q 'Could not create server TCP listening socket\|Failed listening on port' \
           "$dir/redis.log" 2>/dev/null; then
        break
      fi
      # A configuration it cannot use fails on any port.
      if grep -q 'Failed to configure TLS\|FATAL CONFIG FILE ERROR' "$dir/redis.log" 2>/dev/null; then
        echo "redis.sh: $name cannot start with $conf:" >&2
        tail -n 5 "$dir/redis.log" >&2
        return 1
      fi
      sleep 0.1
    done
    echo "redis.sh: $name did not start on port $port (try $try):" >&2
    tail -n 5 "$dir/redis.log" >&2 2>/dev/null || true
    stop_pidfile "$dir/redis.pid" >/dev/null
  done
  return 1
}

# make_certs: a CA, a server certificate for 127.0.0.1 and a client
# certificate, all signed by the CA (EC P-256, valid 30 days), in $DIR/certs.
make_certs() {
  local d=$DIR/certs
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -subj /CN=kvtier-test-ca -keyout "$d/ca.key" -out "$d/ca.crt" 2>"$d/openssl.log" &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj /CN=127.0.0.1 -keyout "$d/server.key" -out "$d/server.csr" 2>>"$d/openssl.log" &&
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 30 -extfile <(printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n') \
    -out "$d/server.crt" 2>>"$d/openssl.log" &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj /CN=kvtier-test-client -keyout "$d/client.key" -out "$d/client.csr" 2>>"$d/openssl.log" &&
  openssl x509 -req -in "$d/client.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 30 -extfile <(printf 'extendedKeyUsage=clientAuth\n') \
    -out "$d/client.crt" 2>>"$d/openssl.log" || { cat "$d/openssl.log" >&2; return 1; }
  chmod 600 "$d"/*.key
}

start_failed() { # a failure in start stops whatever was started
  echo "redis.sh: start failed: $*; stopping what was started" >&2
  cmd_stop "$DIR" >&2
  exit 1
}

cmd_start() {
  local p s k c1 c2 c3 t i node ok
  command -v redis-server >/dev/null || die "redis-server not on PATH (scripts/redis.sh install)"
  command -v redis-cli >/dev/null || die "redis-cli not on PATH (scripts/redis.sh install)"
  command -v openssl >/dev/null || die "openssl not on PATH (scripts/redis.sh install)"
  mkdir -p "$1"
  DIR=$(cd "$1" && pwd -P)
  # The paths go unquoted into redis config files and into the env file.
  [[ "$DIR" =~ ^[A-Za-z0-9._/+-]+$ ]] || die "DIR must be a path of [A-Za-z0-9._/+-] only: $DIR"
  for p in "$DIR"/*/redis.pid; do
    [ -e "$p" ] || continue
    if is_redis_pid "$(pid_of "$p")"; then
      die "a server started in $DIR is still running ($p); run: $0 stop $DIR"
    fi
  done
  rm -f "$DIR/env"

  s=$(launch standalone plain) || start_failed "standalone server did not start"
  k=$(launch killable plain) || start_failed "killable server did not start"
  c1=$(launch cluster1 cluster) || start_failed "cluster node 1 did not start"
  c2=$(launch cluster2 cluster) || start_failed "cluster node 2 did not start"
  c3=$(launch cluster3 cluster) || start_failed "cluster node 3 did not start"
  make_certs || start_failed "openssl could not make the TLS certificates"
  TLS_CLI=(--tls --cacert "$DIR/certs/ca.crt" --cert "$DIR/certs/client.crt" --key "$DIR/certs/client.key")
  t=$(launch tls tls) || start_failed "TLS server did not start"
  TLS_CLI=()

  if ! timeout 30 redis-cli --cluster create \
      "127.0.0.1:$c1" "127.0.0.1:$c2" "127.0.0.1:$c3" \
      --cluster-replicas 0 --cluster-yes >"$DIR/cluster-create.log" 2>&1; then
    cat "$DIR/cluster-create.log" >&2
    start_failed "redis-cli --cluster create failed"
  fi
  for (( i = 0; i < WAIT_TENTHS; i++ )); do
    ok=1
    for node in "$c1" "$c2" "$c3"; do
      cli "$node" CLUSTER INFO | tr -d '\r' | grep -qx 'cluster_state:ok' || { ok=0; break; }
    done
    [ "$ok" = 1 ] && break
    sleep 0.1
  done
  if [ "$ok" != 1 ]; then
    cat "$DIR/cluster-create.log" >&2
    for node in "$c1" "$c2" "$c3"; do
      echo "node $node:" >&2; cli "$node" CLUSTER INFO >&2 || true
    done
    start_failed "cluster_state not ok on every node after 10 s"
  fi

  cat >"$DIR/env" <<EOF
export KVTIER_REDIS_ADDR=127.0.0.1:$s
export KVTIER_REDIS_CLUSTER_ADDRS=127.0.0.1:$c1,127.0.0.1:$c2,127.0.0.1:$c3
export KVTIER_REDIS_TLS_ADDR=127.0.0.1:$t
export KVTIER_REDIS_TLS_CA=$DIR/certs/ca.crt
export KVTIER_REDIS_TLS_CERT=$DIR/certs/client.crt
export KVTIER_REDIS_TLS_KEY=$DIR/certs/client.key
export KVTIER_REDIS_KILLABLE_ADDR=127.0.0.1:$k
export KVTIER_REDIS_KILLABLE_PIDFILE=$DIR/killable/redis.pid
export KVTIER_REDIS_KILLABLE_CMD='redis-server $DIR/killable.conf'
EOF
  cat "$DIR/env"
}

cmd_stop() {
  local dir=$1 p
  [ -d "$dir" ] || return 0
  for p in "$dir"/*/redis.pid; do
    [ -e "$p" ] || continue
    stop_pidfile "$p"
  done
  return 0
}

cmd_install() {
  if command -v redis-server >/dev/null && command -v redis-cli >/dev/null &&
     command -v openssl >/dev/null; then
    echo "redis-server already installed: $(redis-server --version)"
    return 0
  fi
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get install -y redis-server openssl ||
    { "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y redis-server openssl; }
  redis-server --version
}

[ $# -ge 1 ] || usage
case $1 in
  start) [ $# -eq 2 ] || usage; cmd_start "$2" ;;
  stop) [ $# -eq 2 ] || usage; cmd_stop "$2" ;;
  install) [ $# -eq 1 ] || usage; cmd_install ;;
  -h|--help|help) usage ;;
  *) usage ;;
esac
