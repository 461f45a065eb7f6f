# Network namespaces as nodes: sourced by tests/net/run.sh (and usable by hand).
#
#   net_up NODES       N namespaces on one bridge, node i at 10.231.0.(i+1), the bridge (the
#                      launcher's side) at 10.231.0.254; removed by net_down, which an EXIT
#                      trap calls, so a failed run leaves nothing behind
#   net_down           removes them (every namespace and link this shell made)
#   NET_SUBNET         the bridge's subnet, for the MPI's interface options
#
# Names carry this shell's PID (bn<pid>…), so two runs never meet, and net_sweep removes the
# leftovers of runs that were killed (a namespace whose PID no longer runs).
NET_SUBNET=10.231.0.0/24
NET_TAG="bn$$"
NET_NODES=0

# Why namespaces cannot be made here (empty if they can).
net_unavailable() {
    if [ "$(id -u)" != 0 ]; then
        echo "network namespaces need root (ip netns add, veth, a bridge); this runs as $(id -un)"
        return
    fi
    if ! command -v ip >/dev/null; then
        echo "the ip command (iproute2) is missing"
        return
    fi
    local probe="${NET_TAG}probe"
    if ! ip netns add "$probe" 2>/tmp/netns-probe.$$; then
        echo "ip netns add failed: $(cat /tmp/netns-probe.$$)"
        rm -f /tmp/netns-probe.$$
        return
    fi
    ip netns del "$probe"
    rm -f /tmp/netns-probe.$$
}

# Namespaces and bridges of runs whose shell is gone.
net_sweep() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^bn[0-9]+n[0-9]+$' || true); do
        pid=${ns#bn}
        pid=${pid%%n*}
        kill -0 "$pid" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
    done
    for br in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^bn[0-9]+br$' || true); do
        pid=${br#bn}
        pid=${pid%br}
        kill -0 "$pid" 2>/dev/null || ip link del "$br" 2>/dev/null || true
    done
}

net_up() {
    local nodes=$1 i ns
    net_sweep
    ip link add "${NET_TAG}br" type bridge
    ip addr add 10.231.0.254/24 dev "${NET_TAG}br"
    ip link set "${NET_TAG}br" up
    for ((i = 0; i < nodes; i++)); do
        ns="${NET_TAG}n$i"
        ip netns add "$ns"
        NET_NODES=$((i + 1))
        ip link add "${NET_TAG}v$i" type veth peer name "${NET_TAG}p$i"
        ip link set "${NET_TAG}p$i" netns "$ns"
        ip link set "${NET_TAG}v$i" master "${NET_TAG}br" up
        ip -n "$ns" addr add "10.231.0.$((i + 1))/24" dev "${NET_TAG}p$i"
        ip -n "$ns" link set "${NET_TAG}p$i" up
        ip -n "$ns" link set lo up
    done
}

net_down() {
    local i
    for ((i = 0; i < NET_NODES; i++)); do
        # The host end first: deleting a veth deletes its peer at once, where a deleted
        # namespace is torn down later by the kernel (its veth and name linger a while, and
        # a net_up right after would find them: "File exists").
        ip link del "${NET_TAG}v$i" 2>/dev/null || true
        ip netns del "${NET_TAG}n$i" 2>/dev/null || true
    done
    ip link del "${NET_TAG}br" 2>/dev/null || true
    NET_NODES=0
}
