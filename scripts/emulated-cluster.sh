#!/usr/bin/env bash
# A small multi-node cluster emulated on one machine (docs/cluster.md):
# every node is a network namespace, every node's NIC a veth pair into a
# switch (a bridge in its own namespace), and every NIC is limited by `tc`
# (tbf: the inter-node bandwidth; netem, where the kernel has it: the
# one-way latency). Ranks on the same node talk through that node's own
# address (the kernel's loopback): the fast intra-node link. Nothing is
# added to the namespace this script is started from: no address, no
# route, no interface, no qdisc.
#
#   emulated-cluster.sh up [--name C] [--nodes N] [--ranks-per-node K]
#                          [--rate RATE] [--latency DELAY] [--subnet CIDR|auto]
#   emulated-cluster.sh down [--name C] [--kill]
#   emulated-cluster.sh status [--name C]
#   emulated-cluster.sh mpirun [--name C] [-np P] [MPIRUN-OPTIONS] PROGRAM [ARGS]
#   emulated-cluster.sh run [--name C] -- COMMAND [ARGS]
#   emulated-cluster.sh session [UP-OPTIONS] -- COMMAND [ARGS]
#   emulated-cluster.sh probe        # exit 0 if namespaces can be made here
#
# `mpirun` starts Open MPI inside the first node with its rsh agent set to
# scripts/cluster/netns-rsh (which enters a node's namespace instead of
# ssh-ing to it) and TCP restricted to the cluster's subnet, ranks filling
# node 0 first (rank = node * K + local rank, the grid's row-major order).
# Ranks yield the CPU while they wait in MPI (mpi_yield_when_idle): a rank
# spinning in a blocking call would starve the kernel's packet processing,
# which the emulated links run on the same cores (a 4 KiB all-to-all
# then takes one 4 ms scheduler tick instead of ~0.1 ms). Two TCP
# connections per pair of ranks (btl_tcp_links): over one, Open MPI moves
# only half the rate each way when both directions are busy, as in every
# all-to-all (measured: 49 of 98 MB/s; two connections: 97 MB/s).
# `run` runs COMMAND with MOE_MPIRUN (that launcher), MOE_GRID (N x K) and
# MOE_CLUSTER (the name) exported: examples/trainer/train.sh and
# train-generated.sh then train on the emulated nodes. `session` brings a
# cluster up for one command and down after it, whatever happens.
#
# Defaults (derived in docs/cluster.md): 2 nodes x 2 ranks, 1 Gbit/s per
# NIC, no added latency, the first free /24 in 10.213.0.0/16.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE_DIR="${MOE_CLUSTER_STATE_DIR:-/run/moe-cluster}"
RSH_AGENT="$HERE/cluster/netns-rsh"

NAME=moec
NODES=2
RANKS_PER_NODE=2
RATE=1gbit
LATENCY=0
SUBNET=auto
KILL=0
NAME_GIVEN=0

die() { printf 'emulated-cluster: error: %s\n' "$*" >&2; exit 1; }
note() { printf 'emulated-cluster: %s\n' "$*" >&2; }

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

state_file() { echo "$STATE_DIR/$NAME.env"; }

# --- privileges -----------------------------------------------------------

# Whether this process may make network namespaces; prints why not.
can_make_namespaces() {
  if [[ $EUID -ne 0 ]]; then
    echo "needs root: network namespaces, veth pairs and qdiscs need CAP_SYS_ADMIN and CAP_NET_ADMIN (run it with sudo)"
    return 1
  fi
  command -v ip >/dev/null && command -v tc >/dev/null ||
    { echo "needs iproute2 (ip, tc)"; return 1; }
  local probe="moec-probe-$$" out
  if ! out=$(ip netns add "$probe" 2>&1); then
    echo "cannot create a network namespace here: ${out:-ip netns add failed} (a container without CAP_SYS_ADMIN?)"
    return 1
  fi
  if ! out=$(ip -n "$probe" link add moecp0 type veth peer name moecp1 2>&1); then
    ip netns del "$probe" 2>/dev/null || true
    echo "cannot create a veth pair in a namespace: $out (CONFIG_VETH?)"
    return 1
  fi
  if ! out=$(ip -n "$probe" link set moecp0 up 2>&1 &&
    tc -n "$probe" qdisc add dev moecp0 root tbf rate 1gbit burst 64kb latency 50ms 2>&1); then
    ip netns del "$probe" 2>/dev/null || true
    echo "cannot attach a tbf qdisc: $out (CONFIG_NET_SCH_TBF?)"
    return 1
  fi
  ip netns del "$probe"
}

require_privileges() {
  local why
  why=$(can_make_namespaces) || die "$why"
}

# --- addresses ------------------------------------------------------------

ip2int() { local IFS=.; set -- $1; echo $(( ($1 << 24) | ($2 << 16) | ($3 << 8) | $4 )); }
int2ip() { echo "$(( ($1 >> 24) & 255 )).$(( ($1 >> 16) & 255 )).$(( ($1 >> 8) & 255 )).$(( $1 & 255 ))"; }

# "first last" integer range of an IPv4 CIDR (a bare address is a /32).
cidr_range() {
  local addr=${1%/*} bits=32 base size
  [[ $1 == */* ]] && bits=${1#*/}
  base=$(ip2int "$addr")
  size=$(( 1 << (32 - bits) ))
  base=$(( base & ~(size - 1) & 0xFFFFFFFF ))
  echo "$base $(( base + size - 1 ))"
}

valid_cidr() {
  [[ $1 =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})/([0-9]{1,2})$ ]] || return 1
  local i
  for i in 1 2 3 4; do (( BASH_REMATCH[i] <= 255 )) || return 1; done
  (( BASH_REMATCH[5] >= 8 && BASH_REMATCH[5] <= 29 ))
}

private_cidr() {
  local lo hi
  read -r lo hi < <(cidr_range "$1")
  local p plo phi
  for p in 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16; do
    read -r plo phi < <(cidr_range "$p")
    (( lo >= plo && hi <= phi )) && return 0
  done
  return 1
}

# Every IPv4 network or address in use: this namespace's and every other
# namespace's addresses and routes, and the subnets of clusters this
# script made (up or being made).
networks_in_use() {
  local ns
  { ip -4 -o addr show 2>/dev/null | awk '{print $4}'
    ip -4 route show table all 2>/dev/null | awk '$1 ~ /^[0-9]/ {print $1}'
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
      ip -n "$ns" -4 -o addr show 2>/dev/null | awk '{print $4}'
      ip -n "$ns" -4 route show table all 2>/dev/null | awk '$1 ~ /^[0-9]/ {print $1}'
    done
    cat "$STATE_DIR"/*.env 2>/dev/null | sed -n 's/^MOEC_SUBNET=//p'
  } | grep -v '^127\.' | sort -u
}

# Exit 0 when CIDR overlaps nothing in use; prints the first conflict.
subnet_free() {
  local lo hi olo ohi net
  read -r lo hi < <(cidr_range "$1")
  while read -r net; do
    [[ -n $net ]] || continue
    read -r olo ohi < <(cidr_range "$net")
    if (( lo <= ohi && olo <= hi )); then echo "$net"; return 1; fi
  done < <(networks_in_use)
}

pick_subnet() {
  local third
  for third in $(seq 0 255); do
    if subnet_free "10.213.$third.0/24" >/dev/null; then
      echo "10.213.$third.0/24"
      return
    fi
  done
  die "no free /24 in 10.213.0.0/16; pass --subnet CIDR"
}

# --- tc -------------------------------------------------------------------

# tbf rate in bytes/s for a tc rate ("200mbit", "1gbit", "50mbps").
rate_bytes() {
  local r=${1,,} n unit
  [[ $r =~ ^([0-9]+)(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$ ]] ||
    die "--rate '$1': expected a number with bit, kbit, mbit, gbit, bps, kbps, mbps or gbps (tc's units)"
  n=${BASH_REMATCH[1]}; unit=${BASH_REMATCH[2]}
  case $unit in
    bit) echo $(( n / 8 )) ;; kbit) echo $(( n * 1000 / 8 )) ;;
    mbit) echo $(( n * 1000000 / 8 )) ;; gbit) echo $(( n * 1000000000 / 8 )) ;;
    bps) echo "$n" ;; kbps) echo $(( n * 1000 )) ;;
    mbps) echo $(( n * 1000000 )) ;; gbps) echo $(( n * 1000000000 )) ;;
  esac
}

latency_us() {
  local l=${1,,}
  [[ $l =~ ^([0-9]+)(us|ms|s)?$ ]] || die "--latency '$1': expected e.g. 0, 50us, 2ms"
  case ${BASH_REMATCH[2]} in
    ''|us) echo "${BASH_REMATCH[1]}" ;; ms) echo $(( BASH_REMATCH[1] * 1000 )) ;;
    s) echo $(( BASH_REMATCH[1] * 1000000 )) ;;
  esac
}

# Limits one NIC (DEV in namespace NS) to the cluster's rate, and delays
# it by the latency. A real NIC has no burst allowance: a message waits for
# the wire whatever came before it. tbf's bucket lets up to `burst` bytes
# pass at once after an idle gap, which would make the small all-to-alls
# between compute phases free, so it holds only 1 ms at the rate (at
# least 16 KiB, ten full frames; larger TSO segments are split by tbf):
# with less, TCP no longer fills the link on this kernel (200 us: ~70 %
# of the rate), and the error it leaves is at most 1 ms per message.
# The queue holds 100 ms, so a burst of all-to-all traffic waits instead
# of being dropped into TCP's retransmission timer (which would measure
# the kernel, not the link).
shape_link() {
  local ns=$1 dev=$2 bytes burst
  bytes=$(rate_bytes "$RATE")
  burst=$(( bytes / 1000 )); (( burst >= 16384 )) || burst=16384
  if (( $(latency_us "$LATENCY") > 0 )); then
    tc -n "$ns" qdisc add dev "$dev" root handle 1: tbf rate "$RATE" burst "$burst" latency 100ms
    tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: netem delay "$(latency_us "$LATENCY")us" limit 100000 ||
      die "the kernel cannot add latency: no netem qdisc (CONFIG_NET_SCH_NETEM); use --latency 0"
  else
    tc -n "$ns" qdisc add dev "$dev" root tbf rate "$RATE" burst "$burst" latency 100ms
  fi
}

# --- up / down ------------------------------------------------------------

CREATED=()
UP_DONE=0

# On any exit from `up` before it finished (an error, die, ^C): delete
# every namespace it made, with their links and qdiscs.
rollback() {
  (( UP_DONE )) && return
  local ns
  for ns in "${CREATED[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -f "$(state_file)"
  note "up failed; removed what it had made: ${CREATED[*]:-nothing}"
}

# Whether ADDR answers NS's ARP request (ping may not be installed): one
# UDP datagram to the discard port makes NS resolve it.
reachable() {
  local ns=$1 addr=$2 try
  for try in $(seq 20); do
    ip netns exec "$ns" bash -c "echo > /dev/udp/$addr/9" 2>/dev/null || true
    ip -n "$ns" neigh show "$addr" | grep -q lladdr && return 0
    sleep 0.1
  done
  return 1
}

cmd_up() {
  require_privileges
  [[ $NODES =~ ^[0-9]+$ ]] && (( NODES >= 2 && NODES <= 64 )) || die "--nodes '$NODES': expected 2..64"
  [[ $RANKS_PER_NODE =~ ^[0-9]+$ ]] && (( RANKS_PER_NODE >= 1 )) || die "--ranks-per-node '$RANKS_PER_NODE': expected a positive integer"
  rate_bytes "$RATE" >/dev/null
  (( $(rate_bytes "$RATE") >= 125000 )) || die "--rate '$RATE': below 1mbit, MPI's start-up would time out"
  latency_us "$LATENCY" >/dev/null
  mkdir -p "$STATE_DIR"
  exec 9>"$STATE_DIR/.lock"
  flock 9
  [[ -e $(state_file) ]] && die "cluster '$NAME' is already up ($0 status / down --name $NAME)"
  local sw="$NAME-sw" nodes=() i ns conflict
  for (( i = 0; i < NODES; i++ )); do nodes+=("$NAME-n$i"); done
  for ns in "$sw" "${nodes[@]}"; do
    ip netns list | awk '{print $1}' | grep -qxF "$ns" &&
      die "a namespace '$ns' exists that this script did not make (no $(state_file)); choose another --name"
  done
  if [[ $SUBNET == auto ]]; then
    SUBNET=$(pick_subnet)
  else
    valid_cidr "$SUBNET" || die "--subnet '$SUBNET': expected an IPv4 CIDR a.b.c.d/8..29"
    private_cidr "$SUBNET" || die "--subnet '$SUBNET' is not inside a private range (10/8, 172.16/12, 192.168/16)"
    conflict=$(subnet_free "$SUBNET") || die "--subnet '$SUBNET' overlaps '$conflict', already in use on this machine"
  fi
  local lo hi
  read -r lo hi < <(cidr_range "$SUBNET")
  (( hi - lo - 1 >= NODES )) || die "--subnet '$SUBNET' has room for $(( hi - lo - 1 )) nodes, not $NODES"
  SUBNET="$(int2ip "$lo")/${SUBNET#*/}"

  trap rollback EXIT
  trap 'exit 130' INT TERM
  ip netns add "$sw"; CREATED+=("$sw")
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  local addrs=() addr
  for (( i = 0; i < NODES; i++ )); do
    ns=${nodes[i]}
    ip netns add "$ns"; CREATED+=("$ns")
    ip -n "$ns" link set lo up
    # The switch port p$i and the node's NIC eth0, made in the switch's
    # namespace with the peer put straight into the node's.
    ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    addr=$(int2ip $(( lo + 1 + i )))
    addrs+=("$addr")
    ip -n "$ns" addr add "$addr/${SUBNET#*/}" dev eth0
    ip -n "$ns" link set eth0 up
    # A NIC of a training cluster keeps its window between bursts (RDMA has
    # no slow start); TCP would restart slow start after every idle
    # gap, i.e. at every all-to-all. Only this namespace's TCP changes.
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
    shape_link "$ns" eth0        # the node's upload
    shape_link "$sw" "p$i"       # its download (incast from several nodes)
  done
  cat > "$(state_file)" <<EOF
# written by scripts/emulated-cluster.sh up; read by down, status, mpirun
MOEC_NAME=$NAME
MOEC_SWITCH=$sw
MOEC_NODES="${nodes[*]}"
MOEC_ADDRS="${addrs[*]}"
MOEC_SUBNET=$SUBNET
MOEC_RATE=$RATE
MOEC_LATENCY=$LATENCY
MOEC_RANKS_PER_NODE=$RANKS_PER_NODE
EOF
  # Every node reaches every other one through the switch.
  for (( i = 1; i < NODES; i++ )); do
    reachable "${nodes[0]}" "${addrs[i]}" ||
      { echo "node ${nodes[i]} (${addrs[i]}) does not answer node ${nodes[0]}" >&2; false; }
  done
  UP_DONE=1
  note "up: $NODES nodes (${nodes[*]}) on $SUBNET, ${RATE} per NIC, latency $LATENCY, $RANKS_PER_NODE ranks per node"
}

load_state() {
  [[ -f $(state_file) ]] || die "cluster '$NAME' is not up (no $(state_file)): $0 up --name $NAME"
  # shellcheck disable=SC1090
  source "$(state_file)"
}

cmd_down() {
  require_privileges
  mkdir -p "$STATE_DIR"
  exec 9>"$STATE_DIR/.lock"
  flock 9
  if [[ ! -f $(state_file) ]]; then
    note "cluster '$NAME' is not up; nothing to remove"
    return 0
  fi
  load_state
  local ns pids busy=()
  for ns in $MOEC_NODES; do
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [[ -z ${pids// } ]] || busy+=("$ns: pids $pids")
  done
  if (( ${#busy[@]} )); then
    if (( KILL )); then
      for ns in $MOEC_NODES; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
      done
      sleep 1
    else
      die "processes still run in the cluster (${busy[*]}); stop them, or down --kill"
    fi
  fi
  # Deleting a namespace deletes its veth ends (and so their peers), its
  # bridge and its qdiscs.
  for ns in $MOEC_NODES $MOEC_SWITCH; do
    if ip netns list | awk '{print $1}' | grep -qxF "$ns"; then
      ip netns del "$ns"
    fi
  done
  rm -f "$(state_file)"
  note "down: removed $MOEC_SWITCH $MOEC_NODES"
}

cmd_status() {
  if [[ ! -f $(state_file) ]]; then
    echo "cluster '$NAME': down"
    return 3
  fi
  load_state
  echo "cluster '$NAME': up"
  echo "  subnet          $MOEC_SUBNET"
  echo "  nodes           $MOEC_NODES"
  echo "  addresses       $MOEC_ADDRS"
  echo "  ranks per node  $MOEC_RANKS_PER_NODE"
  echo "  NIC rate        $MOEC_RATE (tbf, each direction)"
  echo "  latency         $MOEC_LATENCY"
  local ns missing=0
  for ns in $MOEC_SWITCH $MOEC_NODES; do
    ip netns list | awk '{print $1}' | grep -qxF "$ns" || { echo "  MISSING namespace $ns"; missing=1; }
  done
  (( missing )) && return 1
  for ns in $MOEC_NODES; do
    echo "  $ns eth0: $(tc -n "$ns" -s qdisc show dev eth0 | awk '/^qdisc/ {q=$2} /Sent/ {print q, "sent", $2, "B,", $4, "pkt, dropped", $7; exit}')"
  done
}

# --- launching -------------------------------------------------------------

# The mpirun command line (one word per line) for the cluster's nodes.
mpirun_words() {
  local hosts="" ns np=$1
  for ns in $MOEC_NODES; do hosts+="${hosts:+,}$ns:$MOEC_RANKS_PER_NODE"; done
  printf '%s\n' mpirun --allow-run-as-root --oversubscribe --bind-to none \
    --host "$hosts" -np "$np" --map-by slot \
    --mca plm_rsh_agent "$RSH_AGENT" \
    --mca pml ob1 --mca btl tcp,self --mca mpi_yield_when_idle 1 --mca btl_tcp_links 2 \
    --mca btl_tcp_if_include "$MOEC_SUBNET" --mca oob_tcp_if_include "$MOEC_SUBNET" \
    -x OPENBLAS_NUM_THREADS -x OMP_NUM_THREADS -x MASTER_ADDR -x GLOO_SOCKET_IFNAME
}

cmd_mpirun() {
  load_state
  local np=$(( $(wc -w <<< "$MOEC_NODES") * MOEC_RANKS_PER_NODE ))
  if [[ ${1:-} == -np || ${1:-} == -n ]]; then
    [[ ${2:-} =~ ^[0-9]+$ ]] || die "mpirun -np '${2:-}': expected a rank count"
    np=$2; shift 2
  fi
  (( $# )) || die "mpirun: no program given"
  local first words=()
  read -r first _ <<< "$MOEC_NODES"
  mapfile -t words < <(mpirun_words "$np")
  # One BLAS thread per rank: ranks are the parallelism (docs/cluster.md).
  export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
  # torch.distributed (python/torch_moe_peer.py): the rendezvous on node
  # 0, gloo on the nodes' NIC.
  local head
  read -r head _ <<< "$MOEC_ADDRS"
  export MASTER_ADDR="${MASTER_ADDR:-$head}" GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-eth0}"
  exec ip netns exec "$first" "${words[@]}" "$@"
}

# Exports what `run` and `session` give their command.
export_launcher() {
  local nodes
  nodes=$(wc -w <<< "$MOEC_NODES")
  export MOE_CLUSTER="$NAME"
  export MOE_MPIRUN="$HERE/emulated-cluster.sh mpirun --name $NAME"
  export MOE_GRID="${nodes}x$MOEC_RANKS_PER_NODE"
}

cmd_run() {
  load_state
  [[ ${1:-} == -- ]] && shift
  (( $# )) || die "run: no command given"
  export_launcher
  exec "$@"
}

# A cluster for one command: up, COMMAND, down (also when COMMAND fails or
# is interrupted). Without --name, a fresh name, so that sessions (tests
# running in parallel) never meet.
cmd_session() {
  [[ ${1:-} == -- ]] && shift
  (( $# )) || die "session: no command given"
  if (( ! NAME_GIVEN )); then
    NAME="s$(( RANDOM % 10000 ))$$"
    NAME=${NAME:0:8}
  fi
  ( cmd_up ) || exit 1
  trap '"$HERE/emulated-cluster.sh" down --name "$NAME" --kill >/dev/null' EXIT
  trap 'exit 130' INT TERM
  load_state
  export_launcher
  local rc=0
  "$@" || rc=$?
  return $rc
}

# --- main -----------------------------------------------------------------

(( $# )) || { usage >&2; exit 2; }
CMD=$1; shift
ARGS=()
while (( $# )); do
  case $1 in
    --name) NAME=${2:?--name needs a value}; NAME_GIVEN=1; shift 2 ;;
    --nodes) NODES=${2:?}; shift 2 ;;
    --ranks-per-node) RANKS_PER_NODE=${2:?}; shift 2 ;;
    --rate) RATE=${2:?}; shift 2 ;;
    --latency) LATENCY=${2:?}; shift 2 ;;
    --subnet) SUBNET=${2:?}; shift 2 ;;
    --kill) KILL=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) ARGS=("$@"); break ;;
  esac
done
[[ $NAME =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name '$NAME': expected 1-8 lower-case letters or digits, starting with a letter"

case $CMD in
  up) (( ${#ARGS[@]} == 0 )) || die "up: unexpected '${ARGS[0]}'"; cmd_up ;;
  down) (( ${#ARGS[@]} == 0 )) || die "down: unexpected '${ARGS[0]}'"; cmd_down ;;
  status) cmd_status ;;
  mpirun) cmd_mpirun "${ARGS[@]}" ;;
  run) cmd_run "${ARGS[@]}" ;;
  session) cmd_session "${ARGS[@]}" ;;
  probe) why=$(can_make_namespaces) || { echo "cannot emulate a cluster here: $why"; exit 1; }
         echo "network namespaces, veth pairs and tbf qdiscs can be made here" ;;
  -h|--help|help) usage ;;
  *) usage >&2; die "unknown command '$CMD'" ;;
esac
