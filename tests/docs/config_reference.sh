#!/usr/bin/env bash
# docs/configuration.md must be exactly what the binary generates from its key table.
#   bash tests/docs/config_reference.sh ODYSSEY_BINARY REPO_ROOT
set -u
if diff -u "$2/docs/configuration.md" <("$1" config-reference --format markdown); then
  echo "ok: docs/configuration.md is current"
else
  echo "FAIL: docs/configuration.md differs from the key table; regenerate it with"
  echo "  build/odyssey config-reference --format markdown > docs/configuration.md"
  exit 1
fi
