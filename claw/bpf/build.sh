#!/usr/bin/env bash
# Build CLAW's BPF objects into a build directory (default: <repo>/target/bpf, ignored by git).
#
#   claw/bpf/build.sh [OUT_DIR]
#
# Produces, from the sources beside this script:
#   vmlinux.h                    the running kernel's types, from its BTF (never committed);
#                                regenerated when the kernel changes
#   claw_cc.bpf.o                the "claw" struct_ops congestion control
#   cqic_cc.bpf.o                the same source with -DCLAW_VARIANT_CQIC: "cqic"
#   ack_flags_ingress.bpf.o      the server's tc ingress program (ACK loss flags)
#   <name>.bpf.o                 every other claw/bpf/<name>.bpf.c (e.g. the client's
#                                ack_mark_egress), compiled the same way
# Each object is rebuilt only when its source or a header in claw/bpf is newer. Every
# source is tried; the script fails (listing which) if any did not compile.
set -euo pipefail

src_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$src_dir/../.." && pwd)
out_dir=${1:-$repo/target/bpf}
mkdir -p "$out_dir"

die() { printf 'claw/bpf/build.sh: error: %s\n' "$*" >&2; exit 1; }
command -v clang >/dev/null || die "clang is missing (apt-get install clang llvm)"
command -v bpftool >/dev/null || die "bpftool is missing (apt-get install bpftool)"
[ -r /sys/kernel/btf/vmlinux ] || die "/sys/kernel/btf/vmlinux is missing: the kernel was built without BTF"

# vmlinux.h describes the running kernel: regenerate it when the kernel is another one.
kernel_id="$(uname -r) $(uname -v) $(stat -c %s /sys/kernel/btf/vmlinux)"
if [ ! -s "$out_dir/vmlinux.h" ] || [ "$(cat "$out_dir/vmlinux.h.kernel" 2>/dev/null)" != "$kernel_id" ]; then
  bpftool btf dump file /sys/kernel/btf/vmlinux format c > "$out_dir/vmlinux.h.tmp" \
    || die "bpftool could not dump /sys/kernel/btf/vmlinux"
  mv "$out_dir/vmlinux.h.tmp" "$out_dir/vmlinux.h"
  printf '%s\n' "$kernel_id" > "$out_dir/vmlinux.h.kernel"
fi

cflags=(-O2 -g -target bpf -D__TARGET_ARCH_x86 -Wall -Werror
        -I"$out_dir" -I"$src_dir" -I/usr/include/x86_64-linux-gnu)

newest_header=$(ls -t "$src_dir"/*.h "$out_dir/vmlinux.h" 2>/dev/null | head -n1)
failed=()
compile() { # compile SOURCE OBJECT [EXTRA FLAGS...]
  local src=$1 obj=$2; shift 2
  if [ -e "$obj" ] && [ "$obj" -nt "$src" ] && [ "$obj" -nt "$newest_header" ] && [ "$obj" -nt "${BASH_SOURCE[0]}" ]; then
    return 0
  fi
  if clang "${cflags[@]}" "$@" -c "$src" -o "$obj.tmp"; then
    mv "$obj.tmp" "$obj"
  else
    rm -f "$obj.tmp"
    failed+=("$(basename "$src")${*:+ ($*)}")
  fi
}

for src in "$src_dir"/*.bpf.c; do
  name=$(basename "$src" .bpf.c)
  compile "$src" "$out_dir/$name.bpf.o"
  if [ "$name" = claw_cc ]; then
    compile "$src" "$out_dir/cqic_cc.bpf.o" -DCLAW_VARIANT_CQIC
  fi
done

[ ${#failed[@]} -eq 0 ] || die "did not compile: ${failed[*]}"
