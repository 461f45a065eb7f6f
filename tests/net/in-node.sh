#!/usr/bin/env bash
# Runs one rank in its node's network namespace: rank r of NET_RANKS_PER_NODE-rank nodes goes
# to namespace ${NET_TAG}n$((r / NET_RANKS_PER_NODE)). The launcher starts every rank through
# this (`mpirun ... tests/net/in-node.sh PROGRAM ARGS`).
set -euo pipefail
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-}}}
[ -n "$rank" ] || { echo "in-node.sh: no rank in the environment (not started by an MPI launcher?)" >&2; exit 2; }
exec ip netns exec "${NET_TAG:?}n$((rank / ${NET_RANKS_PER_NODE:?}))" "$@"
