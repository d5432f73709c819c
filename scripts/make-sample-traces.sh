#!/usr/bin/env bash
# Regenerate traces/samples/: one 20 s trace per synth preset (seed 1) and the first 2 s of
# busy-cell as CSV. Deterministic: running it again rewrites the same bytes (same numpy).
#
# Uses the venv's clawbed (.venv/bin/clawbed), or $CLAWBED if set.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
clawbed=${CLAWBED:-$repo/.venv/bin/clawbed}
[ -x "$clawbed" ] || { echo "make-sample-traces: no clawbed at $clawbed (run scripts/provision.sh, or set CLAWBED)" >&2; exit 1; }
out=$repo/traces/samples

# The preset names are the first word of each line of --list.
presets=$("$clawbed" trace synth --list | awk '{print $1}')
for preset in $presets; do
  "$clawbed" trace synth --preset "$preset" --seconds 20 --seed 1 -o "$out/$preset.cbt"
done
# A shorter trace with the same seed is exactly the start of the longer one.
"$clawbed" trace synth --preset busy-cell --seconds 2 --seed 1 -o "$out/busy-cell.csv"
