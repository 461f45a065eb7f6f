#!/usr/bin/env bash
# Every package's docs build without a warning (broken or private intra-doc links included),
# without features and with the features docs.rs builds it with ([package.metadata.docs.rs]).
# The library targets only: barrier-cli's `barrier` binary and the core's `barrier` library
# would write the same doc path.
#
#   bash tests/docs/run.sh      (MPI_PKG_CONFIG picks the MPI for barrier-mpi's `mpi` feature)
set -euo pipefail
cd "$(dirname "$0")/../.."
export RUSTDOCFLAGS="-D warnings"
export MPI_PKG_CONFIG="${MPI_PKG_CONFIG:-ompi}"
cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    # [package.metadata.docs.rs] is the table "docs", then "rs", in cargo metadata.
    docs = (((p.get("metadata") or {}).get("docs") or {}).get("rs") or {})
    print(p["name"], ",".join(docs.get("features", [])) or "-")
' | while read -r package features; do
    for f in - "$features"; do
        args=(--no-deps --lib -p "$package")
        [ "$f" = - ] || args+=(--features "$package/$f")
        echo "docs: $package ${f/#-/(no features)}"
        CARGO_TARGET_DIR=target/docs cargo doc -q "${args[@]}"
        [ "$f" != "$features" ] || break
    done
done
echo "docs: every package builds its docs without a warning"
