#!/usr/bin/env bash
# A deliberately slower revision of HEAD, to measure what the A/B regression check catches when a
# real code change (not --inject-delay-ms) slows page loads (docs/regression.md, "Error rates"):
#
#   orchestrator/ci/slow-commit.sh air-ms MS      the emulator's air-interface delay (each way,
#                                                 emulator/config.py's Delays.air_ms) 1 ms → MS
#   orchestrator/ci/slow-commit.sh client-ms MS   the CLAW client sleeps MS ms for every diag
#                                                 message it handles (claw/client/daemon.py)
#
# The change is committed in a temporary worktree on no branch, which is removed again; the
# commit's id is printed (use it as --candidate; `git gc` drops it once nothing refers to it).
# This checkout's files are not touched.
set -euo pipefail

die() { printf 'slow-commit.sh: error: %s\n' "$*" >&2; exit 2; }
[ $# -eq 2 ] || die "usage: $0 air-ms MS | client-ms MS"
kind=$1 value=$2
[[ $value =~ ^[0-9]+([.][0-9]+)?$ ]] || die "MS $value: not a number of milliseconds"
repo=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
tree=$(mktemp -d /tmp/clawbed-slow-XXXXXX)
rmdir "$tree"
git -C "$repo" worktree add --quiet --detach "$tree" HEAD
trap 'git -C "$repo" worktree remove --force "$tree"' EXIT

case $kind in
  air-ms)
    file=emulator/config.py
    grep -q 'air_ms: float = Field(1.0,' "$tree/$file" || die "$file: Delays.air_ms's default (1.0) not found"
    sed -i "s/air_ms: float = Field(1.0,/air_ms: float = Field($value,/" "$tree/$file"
    message="slower on purpose: air-interface delay $value ms each way (regression-check calibration)" ;;
  client-ms)
    file=claw/client/daemon.py
    grep -q '^    def _handle(self, message' "$tree/$file" || die "$file: the client's _handle not found"
    sed -i "/^    def _handle(self, message/a\\        __import__(\"time\").sleep($value / 1000)  # slower on purpose" "$tree/$file"
    message="slower on purpose: the CLAW client sleeps $value ms per diag message (regression-check calibration)" ;;
  *) die "$kind: one of air-ms, client-ms" ;;
esac
git -C "$tree" -c user.name="clawbed calibration" -c user.email=calibration@clawbed.invalid \
  commit --quiet -a -m "$message"
git -C "$tree" rev-parse HEAD
