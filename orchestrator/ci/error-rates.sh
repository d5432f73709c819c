#!/usr/bin/env bash
# Error rates of the A/B regression check (docs/regression.md, "Error rates"): run the same
# `clawbed regress` N times, each into a sweep of its own, then count each check's verdicts.
#
#   orchestrator/ci/error-rates.sh N NAME [SPEC] -- [regress options]
#
#   N     how many runs (e.g. 40; each a full A/B of SPEC)
#   NAME  the runs' sweeps are NAME-1 … NAME-N (a rerun with the same NAME counts what is there)
#   SPEC  default orchestrator/suites/ci.yaml
#
# Examples (HEAD resolved once, so commits landing meanwhile change nothing):
#   head=$(git rev-parse HEAD)
#   orchestrator/ci/error-rates.sh 40 fa -- --against $head --candidate $head             # false alarms
#   orchestrator/ci/error-rates.sh 20 inj10 -- --against $head --candidate $head --inject-delay-ms 10
#   orchestrator/ci/error-rates.sh 20 air -- --against $head --candidate $(orchestrator/ci/slow-commit.sh air-ms 3.5)
#
# Timing measurements: run it on a quiet machine (nothing else running). Prints, per check, how
# many runs said regression / ok / anything else, the failing share, and the runs' wall times.
set -euo pipefail

die() { printf 'error-rates.sh: error: %s\n' "$*" >&2; exit 2; }
[ $# -ge 2 ] || die "usage: $0 N NAME [SPEC] -- [regress options]"
n=$1 name=$2
shift 2
spec=orchestrator/suites/ci.yaml
if [ $# -gt 0 ] && [ "$1" != -- ]; then spec=$1; shift; fi
[ $# -eq 0 ] || { [ "$1" = -- ] || die "expected -- before the regress options, got $1"; shift; }
[[ $n =~ ^[1-9][0-9]*$ ]] || die "N $n: not a positive count"
[ -f "$spec" ] || die "SPEC $spec: no such file"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
clawbed=${CLAWBED:-$repo/.venv/bin/clawbed}
suite=$("$repo/.venv/bin/python" -c 'import sys, pathlib; from clawbed.orchestrator.spec import load_spec; print(load_spec(pathlib.Path(sys.argv[1])).name)' "$spec")
runs=${CLAWBED_RUNS:-$repo/runs}/suites/$suite

for i in $(seq 1 "$n"); do
  if [ -f "$runs/$name-$i/ab.json" ]; then continue; fi  # measured already
  # Exit status 1 is a verdict (a failed check), not an error of this script.
  "$clawbed" regress "$spec" --no-determinism --sweep "$name-$i" "$@" || [ $? -eq 1 ] || die "run $i failed"
done

"$repo/.venv/bin/python" - "$runs" "$name" "$n" <<'PY'
import json
import sys
from collections import Counter
from pathlib import Path

runs, name, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
verdicts: dict[str, Counter] = {}
walls = []
for i in range(1, n + 1):
    doc = json.loads((runs / f"{name}-{i}" / "ab.json").read_text())
    walls.append(doc["wall_s"])
    for c in doc["comparisons"]:
        verdicts.setdefault(f"{c['label']} {c['scheme']}", Counter())[c["verdict"]] += 1
print(f"{name}: {n} run(s), wall time {min(walls):.0f}-{max(walls):.0f} s (mean {sum(walls) / len(walls):.0f} s)")
for check, count in sorted(verdicts.items()):
    failing = sum(v for k, v in count.items() if k in ("regression", "missing", "new-failures", "too-few-loads"))
    print(f"  {check}: {failing}/{n} failing ({failing / n:.1%}); " + ", ".join(f"{k} {v}" for k, v in sorted(count.items())))
PY
