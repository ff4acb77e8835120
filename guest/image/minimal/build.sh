#!/usr/bin/env bash
# build.sh: the minimal image's initramfs (guest/README.md, "The minimal image").
#
#   guest/image/minimal/build.sh [options] OUT_DIR
#   guest/image/minimal/build.sh [options] --print-inputs
#
# Writes OUT_DIR/initramfs.cpio (or initramfs.cpio.gz with --compression
# gzip) atomically and prints its path on stdout; one progress line per step
# on stderr. --print-inputs prints every file the image is made from, one a
# line, and builds nothing (the set abox's image store hashes to tell a
# stale image, engine/image/image_store.h).
#
# Options (each also read from the environment variable in brackets):
#   --box-guest PATH      the static box-guest binary [BOX_GUEST] (required)
#   --busybox PATH        a static busybox [BUSYBOX] (default /bin/busybox,
#                         from Debian's busybox-static)
#   --kernel-dir DIR      where scripts/setup.sh put the guest kernel [KERNEL_DIR]
#                         (default .cache/guest-kernel); the modules of
#                         guest/modules.list come from DIR/modules/
#   --modules-list FILE   the modules to pack, in load order [MODULES_LIST]
#                         (default guest/modules.list beside this recipe)
#   --compression none|gzip  [ABOX_INITRAMFS_COMPRESSION] (default none: it
#                         boots faster under TCG, see guest/README.md)
#
# The image: busybox and its applets, box-guest as /sbin/box-guest
# (stripped), this folder's init as /init, etc/passwd, etc/group and
# etc/hostname, /etc/resolv.conf -> /run/resolv.conf, the modules and
# /etc/modules (their load order), empty /proc /sys /dev /run /tmp /root,
# and /home/agent. Deterministic: entries sorted, every mtime 0, inode and
# device numbers renumbered, everything owned by root except /home/agent
# (1000:1000, mode 0700): two cpio archives back to back, which the kernel
# unpacks in turn.
#
# Exit codes: 0 built; 1 an input is missing or wrong (the message says
# which); 2 usage.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
modules_list=${MODULES_LIST:-$root/guest/modules.list}

box_guest=${BOX_GUEST:-}
busybox=${BUSYBOX:-/bin/busybox}
kernel_dir=${KERNEL_DIR:-$root/.cache/guest-kernel}
compression=${ABOX_INITRAMFS_COMPRESSION:-none}
out_dir=
print_inputs=0

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while (($#)); do
  case $1 in
    --box-guest) box_guest=${2:?}; shift 2 ;;
    --busybox) busybox=${2:?}; shift 2 ;;
    --kernel-dir) kernel_dir=${2:?}; shift 2 ;;
    --modules-list) modules_list=${2:?}; shift 2 ;;
    --compression) compression=${2:?}; shift 2 ;;
    --print-inputs) print_inputs=1; shift ;;
    -h | --help) usage ;;
    -*) echo "build.sh: unknown option $1" >&2; usage ;;
    *) [[ -z $out_dir ]] || usage; out_dir=$1; shift ;;
  esac
done
[[ $print_inputs == 1 || -n $out_dir ]] || usage
case $compression in none | gzip) ;; *) echo "build.sh: --compression is none or gzip" >&2; exit 2 ;; esac

die() {
  echo "build.sh: $*" >&2
  exit 1
}
step() { echo "minimal: $*" >&2; }

# The modules, in load order.
modules=()
while read -r path; do
  [[ -z $path || $path == \#* ]] && continue
  modules+=("${path##*/}")
done <"$modules_list"

if ((print_inputs)); then
  printf '%s\n' "$here/build.sh" "$here/init" "$here/etc/passwd" "$here/etc/group" "$here/etc/hostname" \
    "$modules_list" "${box_guest:-BOX_GUEST unset}" "$busybox"
  for m in "${modules[@]}"; do echo "$kernel_dir/modules/$m"; done
  exit 0
fi

step "checking inputs"
static_binary() { # PATH: an executable without a program interpreter
  [[ -x $1 ]] && ! readelf -l "$1" 2>/dev/null | grep -q 'program interpreter' && readelf -h "$1" >/dev/null 2>&1
}
[[ -n $box_guest ]] || die "no box-guest binary: pass --box-guest PATH or set BOX_GUEST"
static_binary "$box_guest" || die "$box_guest is not a static executable (build the box-guest target without ABOX_SANITIZE)"
static_binary "$busybox" || die "$busybox is not a static executable (install busybox-static)"
for tool in cpio strip readelf; do command -v "$tool" >/dev/null || die "$tool is missing (scripts/setup.sh installs it)"; done
for m in "${modules[@]}"; do
  [[ -f $kernel_dir/modules/$m ]] || die "$kernel_dir/modules/$m is missing (run scripts/setup.sh)"
done

mkdir -p "$out_dir"
work=$(mktemp -d "$out_dir/.minimal.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/tree
mkdir -p "$tree"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,run,tmp,root,lib/modules,home/agent}

step "busybox and its applets"
install -m 755 "$busybox" "$tree/bin/busybox"
for applet in $("$busybox" --list); do
  [[ -e $tree/bin/$applet ]] || ln -s busybox "$tree/bin/$applet"
done

step "box-guest ($(stat -c %s "$box_guest") bytes, stripped into the image)"
strip --strip-all -o "$tree/sbin/box-guest" "$box_guest"
chmod 755 "$tree/sbin/box-guest"

step "kernel modules: ${modules[*]}"
: >"$tree/etc/modules"
for m in "${modules[@]}"; do
  install -m 644 "$kernel_dir/modules/$m" "$tree/lib/modules/$m"
  echo "$m" >>"$tree/etc/modules"
done

step "/init, passwd, group, hostname, resolv.conf"
install -m 755 "$here/init" "$tree/init"
install -m 644 "$here/etc/passwd" "$here/etc/group" "$here/etc/hostname" "$tree/etc/"
ln -s /run/resolv.conf "$tree/etc/resolv.conf"
chmod 755 "$tree"/{bin,sbin,usr,usr/bin,usr/sbin,etc,proc,sys,dev,run,lib,lib/modules,home}
chmod 700 "$tree/root" "$tree/home/agent"
chmod 1777 "$tree/tmp"

step "packing (compression: $compression)"
find "$tree" -exec touch -h -d @0 {} +
pack() { # OWNER, then paths relative to the tree on stdin
  (cd "$tree" && cpio --quiet -o -H newc --reproducible -R "$1")
}
image=$work/initramfs.cpio
{
  (cd "$tree" && find . -mindepth 1 ! -path ./home/agent | LC_ALL=C sort) | pack 0:0
  echo ./home/agent | pack 1000:1000
} >"$image"
name=initramfs.cpio
if [[ $compression == gzip ]]; then
  gzip -9 -n "$image"
  image=$image.gz
  name=$name.gz
fi
mv "$image" "$out_dir/$name"
step "wrote $out_dir/$name ($(stat -c %s "$out_dir/$name") bytes, sha256 $(sha256sum <"$out_dir/$name" | cut -c1-16)...)"
echo "$out_dir/$name"
