#!/usr/bin/env bash
# Regenerates the ODS-generated references committed under docs/:
# the dialect reference and the pass reference. test/Docs checks they match.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TBLGEN="${MLIR_TBLGEN:-/usr/lib/llvm-22/bin/mlir-tblgen}"
INC=/usr/lib/llvm-22/include
"$TBLGEN" -gen-dialect-doc -dialect=moe -I "$INC" -I "$ROOT/include/moe/Dialect/Moe" \
  "$ROOT/include/moe/Dialect/Moe/MoeOps.td" -o "$ROOT/docs/dialect/MoeDialect.md"
"$TBLGEN" -gen-pass-doc -I "$INC" "$ROOT/include/moe/Transforms/Passes.td" \
  -o "$ROOT/docs/passes/MoePasses.md"
echo "regenerated docs/dialect/MoeDialect.md and docs/passes/MoePasses.md"
