#!/usr/bin/env bash
# Runs one rank in its node's network namespace: rank r of NET_RANKS_PER_NODE-rank nodes (else
# BARRIER_MPI_NODE_BLOCK's) goes to namespace ${NET_TAG}n$((r / ranks per node)). The launcher
# starts every rank through this (`mpirun ... tests/net/in-node.sh PROGRAM ARGS`, or `oshrun`).
set -euo pipefail
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-}}}
[ -n "$rank" ] || { echo "in-node.sh: no rank in the environment (not started by an MPI launcher?)" >&2; exit 2; }
per_node=${NET_RANKS_PER_NODE:-${BARRIER_MPI_NODE_BLOCK:?neither NET_RANKS_PER_NODE nor BARRIER_MPI_NODE_BLOCK is set}}
node=$((rank / per_node))
# UCX (OSHMEM's transport) takes the node's end of its veth pair, the one device there.
export UCX_NET_DEVICES=${NET_TAG:?}p$node
exec ip netns exec "${NET_TAG}n$node" "$@"
