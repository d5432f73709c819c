#!/usr/bin/env bash
# Install everything clawbed needs on a Debian 12 machine, as root, then build it.
#
# Idempotent: each step checks before it acts, so a second run installs nothing, rebuilds
# nothing that is current, and takes seconds. `make setup` (and through it `make test` and
# `make replay`) and the Vagrantfile run this same script.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

say() { printf '\033[1mprovision:\033[0m %s\n' "$*"; }
die() { printf 'provision: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (it installs system packages and later creates network namespaces)"
[ -r /etc/debian_version ] || die "clawbed provisions Debian 12 (bookworm) machines; /etc/debian_version is missing"

# --- System packages -------------------------------------------------------------------
# Why each is here:
#   build-essential pkg-config       C toolchain for the Rust build (cc crate, zstd-sys)
#   clang llvm libbpf-dev bpftool    compile, inspect and load the BPF programs (CLAW's CC, ACK marking)
#   iproute2 ethtool iptables        namespaces, links, qdiscs, offloads, random loss
#   nftables                         cross traffic's per-flow marks and counters (nft)
#   procps                           sysctl (congestion-control settings, below)
#   tcpdump                          server-side captures of the fidelity suite's bulk-flow rows
#   iputils-ping                     idle RTT checks through the emulated link
#   iperf3                           bulk cross traffic
#   nginx                            the HTTP/2 (TLS) web server of replays
#   chromium                         the headless browser that loads pages (driven by Playwright)
#   influxdb influxdb-client         the time-series store behind the dashboards
#   mininet bridge-utils             orchestrator topologies (no Open vSwitch: host links or a Linux bridge)
#   vagrant                          checking the Vagrantfile offline (vagrant validate)
#   python3 python3-venv python3-dev the Python environment of the clawbed distribution
#   openssl                          self-signed certificates for the test web servers
#   ca-certificates git              fetching crates and Python packages by name
apt_packages=(
  build-essential pkg-config
  clang llvm libbpf-dev bpftool
  iproute2 ethtool iptables nftables procps iputils-ping
  iperf3 nginx chromium tcpdump
  influxdb influxdb-client
  mininet bridge-utils vagrant
  python3 python3-venv python3-dev
  openssl ca-certificates git
)

missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done

# Rust: the workspace needs cargo >= 1.85 (clap in Cargo.lock needs it). Use one already installed (rustup in ~/.cargo or
# a distribution one); otherwise Debian's rustc-web/cargo-web (1.85+ in bookworm).
cargo_ok() {
  local v
  v=$("$1" --version 2>/dev/null | awk '{print $2}') || return 1
  [ -n "$v" ] && [ "$(printf '%s\n1.85.0\n' "$v" | sort -V | head -n1)" = "1.85.0" ]
}
cargo_bin=""
for c in "$(command -v cargo || true)" "${HOME:-/root}/.cargo/bin/cargo" /usr/bin/cargo; do
  if [ -n "$c" ] && [ -x "$c" ] && cargo_ok "$c"; then cargo_bin=$c; break; fi
done
if [ -z "$cargo_bin" ]; then
  missing+=(rustc-web cargo-web)
fi

if [ ${#missing[@]} -gt 0 ]; then
  say "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "system packages: all present"
fi
if [ -z "$cargo_bin" ]; then
  cargo_bin=/usr/bin/cargo
  cargo_ok "$cargo_bin" || die "installed cargo-web but $cargo_bin is missing or older than 1.85"
fi

# --- Python environment ------------------------------------------------------------------
# One virtual environment from Debian's Python 3.11, filled from the hash-pinned lock file.
# A stamp of the lock file and pyproject.toml makes the second run a no-op.
venv="$repo/.venv"
stamp="$venv/.clawbed-provisioned"
want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "creating the Python environment in .venv from requirements.lock"
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes --no-deps -r requirements.lock
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  # Mininet is a Debian package for the system Python: expose that one package (not all of
  # dist-packages, whose versions would shadow the lock) through a folder on the venv's path.
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$venv/system-packages"
  ln -sfn /usr/lib/python3/dist-packages/mininet "$venv/system-packages/mininet"
  echo "$venv/system-packages" >"$site/clawbed-system-packages.pth"
  echo "$want" >"$stamp"
else
  say "Python environment: current"
fi

# --- Rust workspace ------------------------------------------------------------------------
# cargo itself skips what is current; --locked builds exactly the committed Cargo.lock.
say "building the Rust workspace (release) with $cargo_bin"
"$cargo_bin" build --release --locked --workspace -q

# --- BPF programs ----------------------------------------------------------------------------
# CLAW's congestion control and its ACK-flag programs, compiled against this kernel's BTF
# (vmlinux.h is generated, never committed); skips what is current.
say "building the BPF programs into target/bpf"
bash claw/bpf/build.sh target/bpf

# --- Kernel settings -------------------------------------------------------------------------
# A namespace other than the root one may default only to a congestion control on the
# allowed list; the baselines (cubic, reno, bbr) must all be usable as a server namespace's
# default, since nginx cannot choose one per socket. This adds to the list, never removes.
allowed=$(sysctl -n net.ipv4.tcp_allowed_congestion_control)
for cc in reno cubic bbr; do
  case " $allowed " in
    *" $cc "*) ;;
    *) if grep -qw "$cc" /proc/sys/net/ipv4/tcp_available_congestion_control; then allowed="$allowed $cc"; fi ;;
  esac
done
if [ "$allowed" != "$(sysctl -n net.ipv4.tcp_allowed_congestion_control)" ]; then
  say "allowing congestion controls as namespace defaults: $allowed"
  sysctl -qw net.ipv4.tcp_allowed_congestion_control="$allowed"
fi

say "ready: .venv/bin/clawbed, target/release/, target/bpf/"
