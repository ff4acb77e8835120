#!/usr/bin/env bash
# build-initramfs.sh: the test guest's initramfs, a gzip'd newc cpio.
#
#   guest/build-initramfs.sh OUT_DIR [KERNEL_DIR]
#
# Writes OUT_DIR/initramfs.cpio.gz (atomically: a reader never sees half a
# file) and prints its path. KERNEL_DIR is what scripts/setup.sh fetched
# (default .cache/guest-kernel): the modules in guest/modules.list come from
# its modules/ folder. The image holds busybox-static and its applets,
# guest/init.sh as /init, guest/udhcpc.script, the modules and /etc/modules
# (their load order). Everything is owned by root, files in sorted order.
#
# Exit codes: 0 built; 1 something it needs is missing (the message says what).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
if (($# < 1 || $# > 2)); then
  echo "usage: $0 OUT_DIR [KERNEL_DIR]" >&2
  exit 2
fi
out_dir=$1
kernel_dir=${2:-$root/.cache/guest-kernel}
busybox=/bin/busybox

die() {
  echo "build-initramfs: $*" >&2
  exit 1
}
[[ -x $busybox ]] || die "$busybox is missing (busybox-static; scripts/setup.sh installs it)"
# A dynamically linked busybox would need its libraries in the image too.
if readelf -l "$busybox" 2>/dev/null | grep -q 'program interpreter'; then
  die "$busybox is not statically linked (install busybox-static)"
fi
command -v cpio >/dev/null || die "cpio is missing (scripts/setup.sh installs it)"
[[ -d $kernel_dir/modules ]] || die "no guest kernel in $kernel_dir (run scripts/setup.sh)"

mkdir -p "$out_dir"
work=$(mktemp -d "$out_dir/.initramfs.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/tree
mkdir -p "$tree"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,run,tmp,root,lib/modules}

cp "$busybox" "$tree/bin/busybox"
for applet in $("$busybox" --list); do
  [[ -e $tree/bin/$applet ]] || ln -s busybox "$tree/bin/$applet"
done
install -m 755 "$here/init.sh" "$tree/init"
install -m 755 "$here/udhcpc.script" "$tree/etc/udhcpc.script"
echo abox-guest >"$tree/etc/hostname"
: >"$tree/etc/resolv.conf"

: >"$tree/etc/modules"
while read -r path; do
  [[ -z $path || $path == \#* ]] && continue
  module=${path##*/}
  [[ -f $kernel_dir/modules/$module ]] || die "$kernel_dir/modules/$module is missing (run scripts/setup.sh)"
  install -m 644 "$kernel_dir/modules/$module" "$tree/lib/modules/$module"
  echo "$module" >>"$tree/etc/modules"
done <"$here/modules.list"

(cd "$tree" && find . -mindepth 1 | LC_ALL=C sort |
  cpio --quiet -o -H newc -R 0:0) | gzip -1 -n >"$work/initramfs.cpio.gz"
mv "$work/initramfs.cpio.gz" "$out_dir/initramfs.cpio.gz"
echo "$out_dir/initramfs.cpio.gz"
