#!/usr/bin/env bash
# make check-fresh: prove that scripts/provision.sh installs everything clawbed needs on a
# machine that has nothing, by doing it in a fresh Debian 12 root file system.
#
#   1. a minimal Debian 12 (bookworm) root, debootstrapped from the Debian archive this host's
#      apt uses (a pristine tarball of it is cached, so reruns skip the download; every run
#      starts from a fresh copy of that tarball);
#   2. a fresh `git clone` of the current HEAD in it, with no ../shared beside it;
#   3. in a mount and PID namespace of its own, chrooted into that root (which shares this
#      kernel: /proc, /sys, /dev, /dev/net/tun, a bpffs, /sys/kernel/btf read-only, /run and its
#      /run/netns on a tmpfs of its own): `bash scripts/provision.sh`, then a second run of it
#      (which must find everything in place), a smoke `clawbed replay` and a few tests;
#   4. teardown, also on error and Ctrl-C: the processes started inside stopped by PID, what the
#      runs' ledgers list removed (`clawbed cleanup`), every mount undone in reverse, the root
#      deleted; then a check that no namespace, link or mount is left.
#
# It prints each phase's time and the total, and writes everything to
# runs/check-fresh-<date>/check-fresh.log (or under $CLAWBED_RUNS).
#
# Usage: scripts/check-fresh.sh [--keep] [--rebase] [--rev REV]
#   --rev REV  check that commit instead of HEAD
#   --keep     keep the root file system afterwards (its path is printed), for a look inside
#   --rebase   debootstrap again instead of using the cached base tarball
# Environment:
#   CHECK_FRESH_DIR     where the cached base and the root go (default /var/tmp/clawbed-check-fresh)
#   CHECK_FRESH_TESTS   the tests to run inside (pytest arguments; files missing in the clone are skipped)
#   CHECK_FRESH_MIRROR, CHECK_FRESH_SECURITY_MIRROR
#                       Debian archive URIs, when this host's apt configuration names none
#
# Only the installer's network settings of this host are carried into the root: its local CA
# certificates (/usr/local/share/ca-certificates), /etc/pip.conf and apt's proxy settings, if
# any, as a machine on the same network would have them. Services never start inside
# (policy-rc.d): the root has no init, and a daemon started by a package's postinst would
# outlive the check in this host's network namespace.
set -euo pipefail
export LC_ALL=C

suite=bookworm
variant=minbase
default_tests="tests/test_lte.py tests/test_trace_format.py tests/test_provision.py
tests/test_crosstraffic.py::test_bulk_cross_traffic_crosses_the_bottleneck_and_slows_the_page"
smoke_replay=(replay --trace traces/samples/idle-cell.cbt --page set-01 --schemes cubic --runs 1 --loader h2
              --name check-fresh-smoke)
clone_dir=/root/clawbed   # inside the root; no ../shared (/root/shared) beside it

say() { printf '\033[1mcheck-fresh:\033[0m %s\n' "$*"; }
warn() { printf '\033[1mcheck-fresh: warning:\033[0m %s\n' "$*"; }
die() { printf 'check-fresh: error: %s\n' "$*" >&2; exit 1; }
hms() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# Append one phase's line to the table both stages share: name, seconds, status.
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$phases"; }

# ============================================================================================
# The inner stage: PID 1 of a new PID namespace, in a private mount namespace (unshare runs
# this script again with --in-namespace). Mounts what the root needs, runs each phase
# chrooted, then tears down. Everything it mounts vanishes with the namespace anyway; it is
# still undone explicitly, in reverse.
# ============================================================================================
inner() {
  root=$1 rundir=$2
  phases=$rundir/phases.tsv
  local hostpid _
  read -r hostpid _ </proc/self/stat      # this host's /proc: our PID as the host sees it
  echo "$hostpid" >"$rundir/inner.pid"

  mounted=()       # our mounts, in the order made
  phase_running=0
  torn_down=0
  trap 'say "stopping (signal)"; teardown; exit 130' TERM INT HUP
  trap 'teardown' EXIT

  mnt() {  # mnt TARGET mount-args...: mount and remember it
    local target=$1; shift
    mount "$@" "$target" || return 1
    mounted+=("$target")
  }
  local ok=1
  # The root bound on itself first: `ip netns exec` needs / to be a mount point.
  { mnt "$root" --bind "$root" &&
    mnt "$root/proc" -t proc -o nosuid,nodev,noexec proc &&
    mnt "$root/sys" -t sysfs -o nosuid,nodev,noexec sysfs &&
    mnt "$root/sys/fs/bpf" -t bpf -o mode=0700 bpf &&
    mnt "$root/sys/kernel/btf" --bind /sys/kernel/btf &&
    mount -o remount,bind,ro "$root/sys/kernel/btf" &&
    mnt "$root/dev" --rbind /dev &&
    mnt "$root/run" -t tmpfs -o nosuid,nodev,mode=0755 tmpfs &&
    mkdir -p "$root/run/netns" "$root/run/lock" && chmod 1777 "$root/run/lock"; } || ok=0
  [ -c "$root/dev/net/tun" ] || { warn "no /dev/net/tun inside the root"; ok=0; }
  if [ "$ok" = 0 ]; then
    record "mounts for the root" 0 FAILED
    exit 1
  fi
  say "root mounted: / (bound on itself), /proc (own PID namespace), /sys, bpffs, /sys/kernel/btf (ro), /dev (with /dev/net/tun), /run with /run/netns (tmpfs)"

  # Phase 1: provision from nothing, with the package lists before and after.
  packages >"$rundir/packages-base.txt"
  local listed already=()
  listed=$(sed -n '/^apt_packages=(/,/^)/p' "$root$clone_dir/scripts/provision.sh" |
           sed 's/#.*//; s/apt_packages=(//; s/)//' | tr -s ' \n' '\n' | grep -v '^$' || true)
  for p in $listed; do
    grep -q "^$p " "$rundir/packages-base.txt" && already+=("$p")
  done
  say "the base has $(wc -l <"$rundir/packages-base.txt") packages (Debian $(cat "$root/etc/debian_version") $variant);" \
      "of the $(echo "$listed" | wc -w) that provision.sh lists, ${#already[@]} are in it${already[*]:+: ${already[*]}}"
  say "the base's Rust: $(chroot "$root" sh -c 'command -v cargo || echo none')"

  local rc
  run_phase "provision (from nothing)" bash scripts/provision.sh && rc=0 || rc=$?
  packages >"$rundir/packages-after.txt"
  comm -13 <(cut -d' ' -f1 "$rundir/packages-base.txt") <(cut -d' ' -f1 "$rundir/packages-after.txt") \
    >"$rundir/packages-installed.txt" || true
  say "provision installed $(wc -l <"$rundir/packages-installed.txt") Debian packages from nothing (with versions in packages-after.txt):"
  join -j1 "$rundir/packages-installed.txt" "$rundir/packages-after.txt" | column -c 110 | sed 's/^/    /' || true
  if [ "$rc" -ne 0 ]; then
    record "provision (again)" 0 skipped; record "smoke replay" 0 skipped; record "tests" 0 skipped
    exit 1
  fi
  say "toolchain inside: $(chroot "$root" sh -c 'cargo --version; rustc --version' | tr '\n' ' ')"

  # Phase 2: the second run must find everything in place.
  run_phase "provision (again)" bash scripts/provision.sh || true

  # Phase 3: the smallest replay.
  if run_phase "smoke replay" .venv/bin/clawbed "${smoke_replay[@]}"; then
    if [ ! -s "$root$clone_dir/runs/check-fresh-smoke/results.csv" ]; then
      warn "the smoke replay exited 0 but wrote no results.csv"
      sed -i '$ s/\tok$/\tFAILED/' "$phases"
    fi
  fi
  mkdir -p "$rundir/smoke-replay"
  cp "$root$clone_dir"/runs/check-fresh-smoke/{manifest.json,results.csv,results.jsonl} "$rundir/smoke-replay/" 2>/dev/null || true

  # Phase 4: a few tests.
  local tests=() t
  for t in ${CHECK_FRESH_TESTS:-$default_tests}; do
    if [ -e "$root$clone_dir/${t%%::*}" ]; then tests+=("$t"); else say "not in this clone, skipped: $t"; fi
  done
  if [ ${#tests[@]} -gt 0 ]; then
    run_phase "tests" .venv/bin/pytest -q -p no:cacheprovider "${tests[@]}" || true
  else
    record "tests" 0 skipped
  fi
}

# The package list of the root: "name version" per line, sorted.
packages() {
  chroot "$root" dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\n' |
    awk '$1 == "ii" {print $2, $3}' | sort
}

# run_phase NAME COMMAND...: run COMMAND in the clone inside the root, with a clean
# environment (no CLAWBED_SHARED, no pip/cargo settings of this host), timed, each line of its
# output stamped with the time into the phase. In the background, so that a signal to this
# stage is handled at once; exec, so the PID in phase.pid is the program's own.
run_phase() {
  local name=$1 start=$SECONDS rc=0; shift
  say "── $name: $*"
  rm -f "$rundir/phase.pid" "$rundir/phase.rc"
  { chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash LANG=C.UTF-8 \
      TERM="${TERM:-dumb}" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      /bin/bash -c 'cd "$0" && exec "$@"' "$clone_dir" "$@" &
    echo $! >"$rundir/phase.pid"
    local r=0
    wait $! || r=$?
    echo "$r" >"$rundir/phase.rc"; } 2>&1 </dev/null | stamp &
  phase_running=1 phase_name=$name phase_start=$start
  wait $! || true
  phase_running=0
  rc=$(cat "$rundir/phase.rc" 2>/dev/null || echo 1)
  local took=$((SECONDS - start))
  if [ "$rc" -eq 0 ]; then record "$name" "$took" ok; else record "$name" "$took" FAILED; fi
  say "── $name: $([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)") in $(hms "$took")"
  return "$rc"
}

# Prefix each line with the minutes:seconds since the phase began.
stamp() {
  local start=$SECONDS line t
  while IFS= read -r line || [ -n "$line" ]; do
    t=$((SECONDS - start))
    printf '  %2d:%02d | %s\n' $((t / 60)) $((t % 60)) "$line"
  done
}

# The PIDs (in our PID namespace) of the processes running inside, but this stage's own (PID 1
# and the subshell that lists them).
inside_pids() {
  local d p
  for d in "$root"/proc/[0-9]*; do
    p=${d##*/}
    if [ "$p" != 1 ] && [ "$p" != "$BASHPID" ] && running_inside "$p"; then echo "$p"; fi
  done
  return 0
}

# Stop what still runs inside, each by its PID: first the tops of the trees left behind
# (processes whose parent has gone, so PID 1 here adopted them: a replay whose pytest ended),
# which stop their own children and remove what they made, up to 15 s; then the rest, TERM
# and, 3 s later, KILL. True if there was anything to stop.
stop_all_inside() {
  local pids p k v cmd tops=()
  pids=$(inside_pids)
  [ -n "$pids" ] || return 1
  for p in $pids; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$root/proc/$p/cmdline" | cut -c1-100) || true
    [ -n "$cmd" ] && warn "still running inside: PID $p $cmd"
    while read -r k v; do [ "$k" = PPid: ] && [ "$v" = 1 ] && tops+=("$p"); done <"$root/proc/$p/status" 2>/dev/null || true
  done
  if [ ${#tops[@]} -gt 0 ]; then
    say "stopping ${tops[*]} (SIGTERM), up to 15 s for their own cleanup"
    kill -TERM "${tops[@]}" 2>/dev/null || true
    local alive
    for _ in $(seq 30); do
      alive=0
      for p in "${tops[@]}"; do running_inside "$p" && alive=1; done
      [ "$alive" = 1 ] || break
      sleep 0.5
    done
  fi
  pids=$(inside_pids)
  if [ -n "$pids" ]; then
    say "stopping the rest: $(echo $pids) (SIGTERM, then SIGKILL)"
    for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 3
    for p in $(inside_pids); do running_inside "$p" && kill -KILL "$p" 2>/dev/null; done
  fi
  return 0
}

# True while PID $1 inside runs (a zombie, waiting for PID 1 here to reap it, has ended).
running_inside() {
  local stat
  stat=$(cat "$root/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# Stop every process still running inside (each by its PID in our PID namespace), remove what
# the runs' ledgers list, check /run/netns, unmount everything under the root in reverse.
teardown() {
  [ "$torn_down" = 1 ] && return 0
  torn_down=1
  trap '' TERM INT HUP
  set +e  # best effort from here: undo as much as can be undone
  local start=$SECONDS
  say "teardown"
  local phase_pid
  phase_pid=$(cat "$rundir/phase.pid" 2>/dev/null || true)
  if [ "$phase_running" = 1 ] && [ -n "$phase_pid" ] && kill -0 "$phase_pid" 2>/dev/null; then
    say "stopping the running phase, $phase_name (PID $phase_pid), up to 30 s for its own cleanup"
    kill -TERM "$phase_pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$phase_pid" 2>/dev/null || break; sleep 0.5; done
  fi
  local stopped=0
  if [ "$phase_running" = 1 ]; then
    record "$phase_name" $((SECONDS - phase_start)) interrupted
    stopped=1
  fi
  mountpoint -q "$root/proc" && stop_all_inside && stopped=1
  # What the runs left: namespaces in the root's /run/netns (a tmpfs of this check's own, so
  # every one there is ours) and root-namespace links that the runs' ledgers name: reported,
  # then removed through the ledgers (clawbed cleanup) and, failing that, by name. Cleanup
  # runs only when something is left: it opens each recorded link's namespace to look for
  # the link, which makes again a namespace that is already gone (and then removes it), so
  # after clean runs it would report removals of its own making. (Processes are gone by now;
  # BPF pins and bpffs mounts go with the unmounting below.)
  local ns left=() ledgers=() ledger link
  for ns in "$root"/run/netns/*; do [ -e "$ns" ] && left+=("namespace ${ns##*/}"); done
  while IFS= read -r ledger; do ledgers+=("$ledger"); done < <(find "$root$clone_dir/runs" "$root/tmp" -name 'ledger*.jsonl' 2>/dev/null)
  if [ ${#ledgers[@]} -gt 0 ]; then
    for link in $(grep -h '"kind": "link"' "${ledgers[@]}" | grep -v '"netns": "' | sed -n 's/.*"name": "\([^"]*\)".*/\1/p' | sort -u); do
      ip link show dev "$link" >/dev/null 2>&1 && left+=("link $link")
    done
  fi
  if [ ${#left[@]} -gt 0 ]; then
    warn "left behind by the runs inside: ${left[*]}"
    record "nothing left behind" 0 FAILED
  fi
  if [ ${#left[@]} -gt 0 ] && [ -x "$root$clone_dir/.venv/bin/clawbed" ]; then
    for ledger in "${ledgers[@]}"; do
      chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        "$clone_dir/.venv/bin/clawbed" cleanup "${ledger#"$root"}" 2>&1 | grep -v ': 0 leftover' | sed 's/^/    /' || true
    done
  fi
  for ns in "$root"/run/netns/*; do
    [ -e "$ns" ] || continue
    warn "deleting namespace ${ns##*/}"
    chroot "$root" ip netns delete "${ns##*/}" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
  done
  # Everything mounted under the root, deepest and newest first: what the project mounted
  # (namespace binds, bpffs), then ours in reverse.
  local m
  while IFS= read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || warn "could not unmount $m"
  done < <(awk -v r="$root" '$5 == r || index($5, r "/") == 1 {print $5}' /proc/self/mountinfo | tac)
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    mountpoint -q "${mounted[i]}" && { umount -R "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}"; }
  done
  if awk -v r="$root" 'index($5, r "/") == 1 {f = 1} END {exit !f}' /proc/self/mountinfo; then
    warn "mounts left under $root"
  fi
  record "teardown (inside)" $((SECONDS - start)) ok
}

# ============================================================================================
# The host stage.
# ============================================================================================

# The Debian archive this host's apt uses: "URI" for $suite (or this host's own codename) and
# for its -security suite, from apt's own reading of sources.list and sources.list.d (both
# formats). An entry whose downloaded Release file names another origin is not Debian's.
host_archive() {
  local want=$1 host_codename uri release comp id lists=/var/lib/apt/lists f p
  host_codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  local targets
  targets=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(IDENTIFIER)' 2>/dev/null) || return 0
  while read -r uri release comp id; do
    [ "$id" = Packages ] && [ "$comp" = main ] || continue
    case "$release" in
      "$suite$want" | "$host_codename$want") ;;
      *) continue ;;
    esac
    p=${uri#*://}; p=${p%/}; p=${p//\//_}
    f=$lists/${p}_dists_${release}_InRelease
    if [ -r "$f" ] && ! grep -q '^Origin: Debian' "$f"; then continue; fi
    echo "$uri"
    return 0
  done <<<"$targets"
}

ensure_debootstrap() {
  command -v debootstrap >/dev/null && return 0
  say "installing debootstrap on this host (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    debootstrap >/dev/null || { apt-get -o DPkg::Lock::Timeout=600 update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    debootstrap >/dev/null; }
}

ensure_base() {
  if [ -s "$base_tar" ] && [ "$rebase" = 0 ]; then
    say "base: the cached pristine $suite ($variant) root, $base_tar ($(du -h "$base_tar" | cut -f1); made $(cat "$base_tar.made" 2>/dev/null || echo '?'))"
    return 0
  fi
  local tmp=$work/debootstrap.$$
  rm -rf "$tmp"
  say "base: debootstrap --variant=$variant $suite from $mirror (downloads ~40 MB)"
  if ! debootstrap --variant="$variant" --arch="$arch" "$suite" "$tmp" "$mirror" >"$rundir/debootstrap.log" 2>&1; then
    tail -n 20 "$rundir/debootstrap.log"
    rm -rf --one-file-system "$tmp"
    return 1
  fi
  grep -E '^I: (Base system installed|Retrieving Release)' "$rundir/debootstrap.log" | sed 's/^/    /' || true
  chroot "$tmp" apt-get clean || return 1   # the .deb files debootstrap leaves; a fresh machine has none
  tar -C "$tmp" --numeric-owner --xattrs --xattrs-include='*' -cpf "$base_tar.tmp" . &&
    mv "$base_tar.tmp" "$base_tar" && date -u '+%Y-%m-%d %H:%M UTC' >"$base_tar.made" || return 1
  local n
  n=$(chroot "$tmp" dpkg-query -W -f='${db:Status-Abbrev}\n' | grep -c '^ii')
  say "base: $n packages; cached as $base_tar"
  rm -rf --one-file-system "$tmp"
}

make_root() {
  rm -rf --one-file-system "$root"
  mkdir -p "$root" &&
    tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' -xpf "$base_tar" || return 1
  # Apt: the Debian archive this host uses, as a fresh install's sources (release, updates, security).
  {
    echo "deb $mirror $suite main"
    echo "deb $mirror $suite-updates main"
    [ -z "$security" ] || echo "deb $security $suite-security main"
  } >"$root/etc/apt/sources.list"
  rm -f "$root"/etc/apt/sources.list.d/*
  sed 's/^/    /' "$root/etc/apt/sources.list"
  # This host's network settings for installers (see the header).
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  grep -q localhost "$root/etc/hosts" 2>/dev/null || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >>"$root/etc/hosts"
  local carried=()
  if compgen -G '/usr/local/share/ca-certificates/*' >/dev/null; then
    cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
    carried+=("local CA certificates ($(cd /usr/local/share/ca-certificates && ls | tr '\n' ' '| sed 's/ $//'))")
  fi
  if [ -r /etc/pip.conf ]; then cp /etc/pip.conf "$root/etc/pip.conf"; carried+=("/etc/pip.conf"); fi
  local proxy
  proxy=$(apt-config dump 2>/dev/null | grep -iE '^Acquire::(https?|ftp)::Proxy' || true)
  if [ -n "$proxy" ]; then
    echo "$proxy" | sed 's/$/;/' >"$root/etc/apt/apt.conf.d/80check-fresh-proxy"
    carried+=("apt proxy settings")
  fi
  say "carried over from this host's network settings: ${carried[*]:-nothing}"
  printf '#!/bin/sh\n# check-fresh: no init here; no service starts\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
}

clone_head() {
  git clone -q --no-hardlinks --no-checkout "$repo" "$root$clone_dir" &&
    git -C "$root$clone_dir" checkout -q --detach "$head" &&
    say "cloned $rev $(git -C "$root$clone_dir" log -1 --format='%h %s' | cut -c1-90) into $clone_dir (no ../shared beside it)"
}

# The cb* links of this host's root network namespace, to compare before and after. (The
# root's namespaces live in a /run/netns of its own, never in this host's.)
host_net_state() {
  ip -o link 2>/dev/null | awk -F': ' '$2 ~ /^cb/ {sub(/@.*/, "", $2); print $2}' | sort || true
}

host_phase() {
  local name=$1 start=$SECONDS rc=0; shift
  "$@" || rc=$?
  if [ "$rc" -eq 0 ]; then record "$name" $((SECONDS - start)) ok; else record "$name" $((SECONDS - start)) FAILED; fi
  return "$rc"
}

finish() {
  local status=$?
  trap '' INT TERM HUP
  set +e
  if [ -n "$inner_pid" ] && kill -0 "$inner_pid" 2>/dev/null; then
    local ipid
    ipid=$(cat "$rundir/inner.pid" 2>/dev/null)
    [ -n "$ipid" ] && kill -TERM "$ipid" 2>/dev/null
    wait "$inner_pid" 2>/dev/null
  fi
  # The inner stage is PID 1 of its namespace: once it has gone, so has everything in it.
  local ipid
  ipid=$(cat "$rundir/inner.pid" 2>/dev/null)
  if [ -n "$ipid" ]; then
    for _ in $(seq 240); do kill -0 "$ipid" 2>/dev/null || break; sleep 0.5; done
  fi
  [ -z "$base_tar" ] || rm -rf --one-file-system "$work/debootstrap.$$" "$base_tar.tmp" 2>/dev/null
  rm -f "$rundir/inner.pid" "$rundir/phase.pid" "$rundir/phase.rc"
  if [ -n "$root" ] && [ -d "$root" ]; then
    local start=$SECONDS
    if awk -v r="$root" '$5 == r || index($5, r "/") == 1 {f = 1} END {exit !f}' /proc/self/mountinfo; then
      warn "mounts under $root in this host's namespace; the root is kept"
      record "host: nothing left behind (mounts)" 0 FAILED
    elif [ "$keep" = 1 ]; then
      say "root kept (--keep): $root"
    else
      rm -rf --one-file-system "$root"
      record "remove the root" $((SECONDS - start)) ok
    fi
  fi
  if [ "$net_before" != unset ]; then
    local new
    new=$(comm -13 <(echo "$net_before") <(host_net_state))
    if [ -n "$new" ]; then
      warn "cb* links that appeared in this host's root namespace during the check (ours, or another run's on this machine):"
      echo "$new" | sed 's/^/    /'
    else
      say "this host: no cb* link left in its root namespace"
    fi
  fi

  local total=$((SECONDS - t0)) failed=0 name took st
  echo
  say "phases ($rev = $head_short):"
  if [ -s "$phases" ]; then
    while IFS=$'\t' read -r name took st; do
      printf '    %-36s %8s  %s\n' "$name" "$(hms "$took")" "$st"
      [ "$st" = FAILED ] && failed=1
    done <"$phases"
  fi
  printf '    %-36s %8s\n' "total" "$(hms "$total")"
  [ "$status" -ne 0 ] && failed=1
  if [ "$failed" = 0 ]; then
    say "PASSED in $(hms "$total"); log: $log"
  else
    say "FAILED after $(hms "$total"); log: $log"
  fi
  trap - EXIT
  [ "$status" -gt 1 ] && exit "$status"
  exit "$failed"
}

host() {
  keep=0 rebase=0 rev=HEAD head="" head_short="?" base_tar="" root="" inner_pid="" net_before=unset
  while [ $# -gt 0 ]; do
    case "$1" in
      --rev) [ $# -ge 2 ] || die "--rev needs a commit"; rev=$2; shift ;;
      --keep) keep=1 ;;
      --rebase) rebase=1 ;;
      -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
  done
  [ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, chroot, mounts, namespaces)"
  for tool in unshare chroot git tar mountpoint; do
    command -v "$tool" >/dev/null || die "$tool is missing on this host"
  done

  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  work=${CHECK_FRESH_DIR:-/var/tmp/clawbed-check-fresh}
  arch=$(dpkg --print-architecture)
  local stamp
  stamp=$(date +%Y%m%d-%H%M%S)
  rundir=${CLAWBED_RUNS:-$repo/runs}/check-fresh-$stamp
  mkdir -p "$work" "$rundir"
  rundir=$(cd "$rundir" && pwd)
  phases=$rundir/phases.tsv
  log=$rundir/check-fresh.log
  : >"$phases"
  exec > >(tee -i -a "$log") 2>&1
  t0=$SECONDS
  trap finish EXIT
  trap 'say "interrupted"; exit 130' INT TERM HUP

  head=$(git -C "$repo" rev-parse --verify "$rev^{commit}") || die "no such commit: $rev"
  head_short=$(git -C "$repo" rev-parse --short "$head")
  say "$(date '+%Y-%m-%d %H:%M:%S'): a fresh Debian 12 root, scripts/provision.sh in it, a smoke replay and a few tests"
  say "checking $rev ($head_short): $(git -C "$repo" log -1 --format=%s "$head" | cut -c1-100)"
  local dirty
  dirty=$(git -C "$repo" status --porcelain --untracked-files=normal | wc -l)
  if [ "$dirty" -gt 0 ]; then
    warn "$dirty uncommitted change(s) in $repo are NOT part of this check: it uses a fresh clone of $rev ($head_short)"
    { git -C "$repo" status --porcelain --untracked-files=normal | head -n 10 | sed 's/^/    /'; } || true
    [ "$dirty" -le 10 ] || echo "    … and $((dirty - 10)) more"
  fi

  mirror=${CHECK_FRESH_MIRROR:-$(host_archive "")}
  security=${CHECK_FRESH_SECURITY_MIRROR:-$(host_archive -security)}
  [ -n "$mirror" ] || die "this host's apt configuration names no Debian archive for $suite (set CHECK_FRESH_MIRROR)"
  [ -n "$security" ] || warn "this host's apt configuration names no Debian security archive; the root goes without it"
  say "Debian archive (from this host's apt configuration): $mirror${security:+, security: $security}"
  local key
  key=$(printf '%s %s %s %s' "$suite" "$variant" "$arch" "$mirror" | sha256sum | cut -c1-8)
  base_tar=$work/base-$suite-$variant-$arch-$key.tar
  root=$work/root-$stamp
  net_before=$(host_net_state)

  host_phase "host: debootstrap installed" ensure_debootstrap || exit 1
  host_phase "base: debootstrap or cache" ensure_base || exit 1
  say "root: a fresh copy of the base in $root"
  host_phase "root: fresh copy of the base" make_root || exit 1
  host_phase "clone of HEAD" clone_head || exit 1

  say "entering a mount and PID namespace of its own, chrooted into $root"
  unshare --mount --propagation private --pid --fork --kill-child=SIGTERM -- \
    env CHECK_FRESH_TESTS="${CHECK_FRESH_TESTS:-}" "$BASH" "${BASH_SOURCE[0]}" --in-namespace "$root" "$rundir" &
  inner_pid=$!
  local rc=0
  wait "$inner_pid" || rc=$?
  inner_pid=""
  exit "$rc"
}

if [ "${1:-}" = "--in-namespace" ]; then
  shift
  inner "$@"
else
  host "$@"
fi
