#!/usr/bin/env bash
# Runs one command as N ranks, each in its own network namespace, joined through a bridge by veth links
# shaped with tc netem (rate and delay on every host's egress; a tbf rate limit alone where the kernel
# has no netem), so that collectives cost about what they cost between machines. Used by `lmcore bench fsdp`; needs root and iproute2. Cleans up after
# itself (namespaces, links, the store folder), also when interrupted.
#
#   bench/fsdp_netns.sh --ranks 4 --rate 1gbit --delay 1ms -- build/release/lmcore train --fsdp ...
#
# Each rank gets LMCORE_RANK, LMCORE_WORLD_SIZE, a shared file:// store and LMCORE_DIST_HOST (its
# address, 10.232.0.<rank + 1>). Rank i's output goes to stdout prefixed with "[rank i] ". The exit
# status is the first non-zero status of a rank, else 0.
set -euo pipefail

ranks=2 rate=1gbit delay=1ms
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "fsdp_netns.sh: unknown option '$1' (expected --ranks N --rate R --delay D -- CMD...)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "fsdp_netns.sh: no command after --" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "fsdp_netns.sh: needs root (network namespaces)" >&2; exit 2; }
command -v ip >/dev/null && command -v tc >/dev/null || { echo "fsdp_netns.sh: needs ip and tc (iproute2)" >&2; exit 2; }

tag="lf$(( $$ % 100000 ))"
hub="${tag}hub"
store=$(mktemp -d /tmp/lmcore-fsdp-netns-XXXXXX)
created=()
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for ns in "${created[@]:-}"; do [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$store"
}
trap cleanup EXIT INT TERM

ip netns add "$hub"; created+=("$hub")
ip netns exec "$hub" ip link add br0 type bridge
ip netns exec "$hub" ip link set br0 up
for ((i = 0; i < ranks; i++)); do
  ns="${tag}h$i" a="${tag}v${i}a" b="${tag}v${i}b"
  ip netns add "$ns"; created+=("$ns")
  ip link add "$a" type veth peer name "$b"
  ip link set "$a" netns "$ns"
  ip link set "$b" netns "$hub"
  ip netns exec "$ns" ip addr add "10.232.0.$((i + 1))/24" dev "$a"
  ip netns exec "$ns" ip link set "$a" up
  ip netns exec "$ns" ip link set lo up
  # Host egress: rate and delay, with a queue deep enough that the rate limit never drops packets.
  # Kernels without sch_netem (some VMs) get the rate alone, through a token bucket.
  if ! ip netns exec "$ns" tc qdisc add dev "$a" root netem delay "$delay" rate "$rate" limit 100000 2>/dev/null; then
    ip netns exec "$ns" tc qdisc add dev "$a" root tbf rate "$rate" burst 256kb latency 500ms
    [ "$i" -ne 0 ] || echo "fsdp_netns.sh: this kernel has no netem qdisc: links limited to $rate (tbf) without the $delay delay" >&2
  fi
  ip netns exec "$hub" ip link set "$b" master br0
  ip netns exec "$hub" ip link set "$b" up
done

status=0
for ((i = 0; i < ranks; i++)); do
  ip netns exec "${tag}h$i" env LMCORE_RANK=$i LMCORE_WORLD_SIZE="$ranks" LMCORE_STORE="file://$store" \
    LMCORE_DIST_HOST="10.232.0.$((i + 1))" "$@" > >(sed -u "s/^/[rank $i] /") 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do
  if ! wait "$p"; then [ $status -ne 0 ] || status=1; fi
done
pids=()
exit $status
