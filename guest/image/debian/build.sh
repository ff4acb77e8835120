#!/usr/bin/env bash
# build.sh: the Debian agent image (guest/README.md, "The Debian image").
#
#   guest/image/debian/build.sh [options] OUT_DIR
#   guest/image/debian/build.sh [options] --print-inputs
#
# Writes OUT_DIR/rootfs.ext4 (the root disk: ext4, label abox-root, booted
# read-only) and OUT_DIR/initramfs.cpio (its /init finds the disks by label,
# puts the instance's writable disk, label abox-upper, over the root with
# overlayfs, and switch_roots to box-guest), each moved in whole, and prints
# their paths on stdout (initramfs first); one progress line per step on
# stderr. --print-inputs prints every file the image is made from, one a
# line, and builds nothing (what abox's image store hashes, with the
# options, to tell a stale image).
#
# The root: `debootstrap --variant=minbase bookworm` from the mirror, then
# Debian's apt in the tree installs ca-certificates, curl, git,
# openssh-client, python3, python3-requests, nodejs, npm and busybox, and
# every --add-package (apt resolves their dependencies); --add-npm packages
# are installed on the host with the host's npm into the tree's /usr/local
# (`npm install --global --prefix ROOT/usr/local --ignore-scripts NAME`):
# nothing is ever run inside the guest to build it. box-guest is
# /sbin/box-guest; the agent user is 1000:1000 with home /home/agent
# (0700); /etc/resolv.conf -> /run/resolv.conf.
#
# Options (each also read from the environment variable in brackets):
#   --box-guest PATH      the static box-guest binary [BOX_GUEST] (required)
#   --add-package NAME    one more Debian package (repeatable)
#   --add-npm NAME        one more npm package, NAME or NAME@VERSION (repeatable)
#   --busybox PATH        a static busybox for the initramfs [BUSYBOX]
#                         (default /bin/busybox, from busybox-static)
#   --kernel-dir DIR      the guest kernel of scripts/setup.sh [KERNEL_DIR]
#                         (default .cache/guest-kernel): the modules come from DIR/modules/
#   --mirror URL          [ABOX_DEBIAN_MIRROR] (default http://deb.debian.org/debian)
#   --security URL        [ABOX_DEBIAN_SECURITY] (default http://deb.debian.org/debian-security;
#                         "none" for none)
#   --cache DIR           where downloaded .debs and npm tarballs are kept, so
#                         a rebuild does not fetch them again [ABOX_IMAGE_CACHE]
#                         (default ${XDG_CACHE_HOME:-~/.cache}/abox: DIR/debian-debs, DIR/npm)
#   --tree-max-age DAYS   reuse the Debian tree a build of the same suite, mirrors
#                         and packages left in DIR/debian-trees (after apt, before
#                         npm and box-guest) when it is younger than DAYS
#                         [ABOX_DEBIAN_TREE_MAX_AGE_DAYS] (default 7; 0 never):
#                         a rebuild for a new box-guest or npm package takes
#                         seconds instead of minutes, and security updates
#                         are at most DAYS old
#
# Needs root (debootstrap and apt in the tree do); packing the disk does not
# mount anything (mkfs.ext4 -d). Deterministic where it can be: every mtime
# is SOURCE_DATE_EPOCH (default 0), the filesystem's UUID and hash seed are
# fixed, the initramfs is sorted with inode numbers renumbered; what apt
# fetches is what the archive holds that day.
#
# Exit codes: 0 built; 1 an input is missing or a step failed (the message
# says which); 2 usage.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
modules_list=${MODULES_LIST:-$root/guest/modules.list}
image_modules_list=$here/modules.list

box_guest=${BOX_GUEST:-}
busybox=${BUSYBOX:-/bin/busybox}
kernel_dir=${KERNEL_DIR:-$root/.cache/guest-kernel}
mirror=${ABOX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${ABOX_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
# abox's image store runs recipes with a bare environment (no HOME): the
# user's home comes from the password database then (npm wants it too).
[[ -n ${HOME:-} ]] || HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
export HOME=${HOME:-/root}
cache=${ABOX_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/abox}
suite=bookworm
base_packages=(ca-certificates curl git openssh-client python3 python3-requests nodejs npm busybox)
add_packages=()
add_npm=()
out_dir=
print_inputs=0
tree_max_age_days=${ABOX_DEBIAN_TREE_MAX_AGE_DAYS:-7}
# Bump when what is made before the tree is saved changes (debootstrap's
# arguments, the apt configuration), so that no older tree is reused.
tree_format=1
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while (($#)); do
  case $1 in
    --box-guest) box_guest=${2:?}; shift 2 ;;
    --add-package) add_packages+=("${2:?}"); shift 2 ;;
    --add-npm) add_npm+=("${2:?}"); shift 2 ;;
    --busybox) busybox=${2:?}; shift 2 ;;
    --kernel-dir) kernel_dir=${2:?}; shift 2 ;;
    --modules-list) modules_list=${2:?}; shift 2 ;;
    --mirror) mirror=${2:?}; shift 2 ;;
    --security) security=${2:?}; shift 2 ;;
    --cache) cache=${2:?}; shift 2 ;;
    --tree-max-age) tree_max_age_days=${2:?}; shift 2 ;;
    --print-inputs) print_inputs=1; shift ;;
    -h | --help) usage ;;
    -*) echo "build.sh: unknown option $1" >&2; usage ;;
    *) [[ -z $out_dir ]] || usage; out_dir=$1; shift ;;
  esac
done
[[ $print_inputs == 1 || -n $out_dir ]] || usage

die() {
  echo "build.sh: $*" >&2
  exit 1
}
started=$SECONDS
step() { echo "debian: [$((SECONDS - started))s] $*" >&2; }

# A Debian package name, or an npm package name with an optional @version:
# nothing that could be an option or reach a shell.
for p in "${add_packages[@]}"; do
  [[ $p =~ ^[a-z0-9][a-z0-9+.-]+$ ]] || die "--add-package $p: not a Debian package name"
done
for p in "${add_npm[@]}"; do
  [[ $p =~ ^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*(@[A-Za-z0-9._^~<>=|*+-]+)?$ ]] ||
    die "--add-npm $p: not an npm package name"
done

modules=()
while read -r path; do
  [[ -z $path || $path == \#* ]] && continue
  modules+=("${path##*/}")
done < <(cat "$modules_list" "$image_modules_list")

if ((print_inputs)); then
  printf '%s\n' "$here/build.sh" "$here/init" "$modules_list" "$image_modules_list" \
    "${box_guest:-BOX_GUEST unset}" "$busybox"
  for m in "${modules[@]}"; do echo "$kernel_dir/modules/$m"; done
  exit 0
fi

step "checking inputs"
static_binary() { # PATH: an executable without a program interpreter
  [[ -x $1 ]] && ! readelf -l "$1" 2>/dev/null | grep -q 'program interpreter' && readelf -h "$1" >/dev/null 2>&1
}
((EUID == 0)) || die "needs root (debootstrap and apt in the new tree do)"
[[ -n $box_guest ]] || die "no box-guest binary: pass --box-guest PATH or set BOX_GUEST"
static_binary "$box_guest" || die "$box_guest is not a static executable (build the box-guest target without ABOX_SANITIZE)"
static_binary "$busybox" || die "$busybox is not a static executable (install busybox-static)"
for tool in debootstrap mkfs.ext4 cpio strip readelf chroot; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/setup.sh installs it)"
done
((${#add_npm[@]} == 0)) || command -v npm >/dev/null || die "npm is missing on the host (--add-npm installs with it)"
for m in "${modules[@]}"; do
  [[ -f $kernel_dir/modules/$m ]] || die "$kernel_dir/modules/$m is missing (run scripts/setup.sh)"
done

mkdir -p "$out_dir" "$cache/debian-debs" "$cache/npm"
out_dir=$(cd "$out_dir" && pwd)
cache=$(cd "$cache" && pwd)
work=$(mktemp -d "$out_dir/.debian.XXXXXX")
tree=$work/rootfs
cleanup() {
  # Never remove a tree with something still mounted in it.
  for m in "$tree/proc" "$tree/sys" "$tree/dev/pts"; do
    mountpoint -q "$m" 2>/dev/null && umount -l "$m"
  done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

in_tree() { chroot "$tree" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" LC_ALL=C "$@"; }
packages=("${base_packages[@]}" "${add_packages[@]}")
[[ $tree_max_age_days =~ ^[0-9]+$ ]] || die "--tree-max-age $tree_max_age_days: a number of days"
tree_key=$(printf '%s\n' "tree-format $tree_format" "$suite" "$mirror" "$security" \
  "$(printf '%s\n' "${packages[@]}" | sort -u)" | sha256sum | cut -c1-16)
saved_tree=$cache/debian-trees/$suite-$tree_key.tar
if [[ -f $saved_tree ]] && ((tree_max_age_days > 0)) &&
  [[ -n $(find "$saved_tree" -maxdepth 0 -mtime "-$tree_max_age_days") ]]; then
  step "the Debian tree of $(date -u -r "$saved_tree" +%F) ($saved_tree; --tree-max-age $tree_max_age_days)"
  mkdir "$tree"
  tar -C "$tree" --numeric-owner --xattrs --xattrs-include='*' -xpf "$saved_tree" ||
    die "cannot unpack $saved_tree (remove it to build the tree again)"
else
  step "debootstrap --variant=minbase $suite from $mirror (.debs cached in $cache/debian-debs)"
  debootstrap --variant=minbase --cache-dir="$cache/debian-debs" "$suite" "$tree" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    die "debootstrap failed: $(tail -3 "$work/debootstrap.log")"

  step "apt sources and policy"
  {
    echo "deb $mirror $suite main"
    echo "deb $mirror $suite-updates main"
    [[ $security == none ]] || echo "deb $security $suite-security main"
  } >"$tree/etc/apt/sources.list"
  printf '#!/bin/sh\n# build.sh: no service starts while the image is built\nexit 101\n' >"$tree/usr/sbin/policy-rc.d"
  chmod 755 "$tree/usr/sbin/policy-rc.d"
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' >"$tree/etc/apt/apt.conf.d/90abox"
  mount -t proc proc "$tree/proc"

  step "apt-get install ${packages[*]}"
  # What the cache has goes where apt looks first (debootstrap has linked its
  # own there already); what apt fetched goes back.
  archives=$tree/var/cache/apt/archives
  for deb in "$cache"/debian-debs/*.deb; do
    [[ -e $deb && ! -e $archives/${deb##*/} ]] || continue
    ln "$deb" "$archives/" 2>/dev/null || cp "$deb" "$archives/" || die "cannot copy $deb into the tree"
  done
  in_tree apt-get update -qq >"$work/apt.log" 2>&1 || die "apt-get update failed: $(tail -3 "$work/apt.log")"
  in_tree apt-get install -y -qq -o Dpkg::Use-Pty=0 "${packages[@]}" >>"$work/apt.log" 2>&1 ||
    die "apt-get install failed: $(tail -5 "$work/apt.log")"
  for deb in "$archives"/*.deb; do
    [[ -e $deb && ! -e $cache/debian-debs/${deb##*/} ]] || continue
    cp "$deb" "$cache/debian-debs/" || die "cannot keep $deb in $cache/debian-debs"
  done
  in_tree apt-get clean
  step "$(in_tree dpkg-query -W -f='.\n' | wc -l) packages installed"
  umount "$tree/proc"
  if ((tree_max_age_days > 0)); then
    step "keeping the Debian tree for rebuilds: $saved_tree"
    mkdir -p "$cache/debian-trees"
    rm -f "$cache/debian-trees/$suite"-*.tar  # one tree per suite: each is hundreds of MiB
    tar -C "$tree" --numeric-owner --xattrs --xattrs-include='*' -cf "$saved_tree.partial" . &&
      mv "$saved_tree.partial" "$saved_tree" || { rm -f "$saved_tree.partial"; die "cannot write $saved_tree"; }
  fi
fi

if ((${#add_npm[@]})); then
  step "npm install --global (on the host, $(npm --version)) ${add_npm[*]}"
  npm install --global --prefix "$tree/usr/local" --ignore-scripts --no-audit --no-fund --no-update-notifier \
    --cache "$cache/npm" "${add_npm[@]}" >"$work/npm.log" 2>&1 || die "npm install failed: $(tail -5 "$work/npm.log")"
  chown -R 0:0 "$tree/usr/local"
fi

step "box-guest, the agent user, resolv.conf, hostname"
strip --strip-all -o "$tree/sbin/box-guest" "$box_guest"
chmod 755 "$tree/sbin/box-guest"
in_tree groupadd --gid 1000 agent
in_tree useradd --uid 1000 --gid 1000 --home-dir /home/agent --create-home --shell /bin/bash \
  --comment "abox agent" agent
chmod 700 "$tree/home/agent"
rm -f "$tree/etc/resolv.conf"
ln -s /run/resolv.conf "$tree/etc/resolv.conf"
echo abox >"$tree/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tabox\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$tree/etc/hosts"
rm -f "$tree/usr/sbin/policy-rc.d"

step "trimming what a read-only root does not need"
rm -rf "$tree"/var/lib/apt/lists/* "$tree"/var/cache/apt/*.bin "$tree"/var/cache/debconf/*-old \
  "$tree"/var/log/* "$tree"/var/cache/ldconfig/aux-cache "$tree/debootstrap" \
  "$tree"/usr/share/doc/* "$tree"/usr/share/man/* "$tree"/usr/share/info/*
: >"$tree/etc/machine-id"
find "$tree" -xdev -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

# The disk: the tree's size and a quarter more, plus 64 MiB; inodes for every
# file and half as many again. No journal: it is only ever mounted read-only.
kib=$(du -s -k -x "$tree" | cut -f1)
files=$(find "$tree" -xdev | wc -l)
size_mib=$(((kib * 5 / 4) / 1024 + 64))
inodes=$((files * 3 / 2 + 4096))
step "packing rootfs.ext4: $((kib / 1024)) MiB in $files files, into $size_mib MiB"
image=$work/rootfs.ext4
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mkfs.ext4 -q -F -L abox-root -O ^has_journal -N "$inodes" -m 0 \
  -U 5ab0c5ab-0000-4000-8000-000000000001 -E hash_seed=5ab0c5ab-0000-4000-8000-000000000002,root_owner=0:0 \
  -d "$tree" "$image" "${size_mib}M" >"$work/mkfs.log" 2>&1 || die "mkfs.ext4 failed: $(tail -3 "$work/mkfs.log")"

step "initramfs: busybox, /init, modules: ${modules[*]}"
initrd=$work/initrd
mkdir -p "$initrd"/{bin,sbin,etc,proc,sys,dev,run,lib/modules,lower,layer,newroot}
install -m 755 "$busybox" "$initrd/bin/busybox"
install -m 755 "$here/init" "$initrd/init"
: >"$initrd/etc/modules"
for m in "${modules[@]}"; do
  install -m 644 "$kernel_dir/modules/$m" "$initrd/lib/modules/$m"
  echo "$m" >>"$initrd/etc/modules"
done
find "$initrd" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
(cd "$initrd" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc --reproducible -R 0:0) >"$work/initramfs.cpio"

mv "$work/initramfs.cpio" "$out_dir/initramfs.cpio"
mv "$image" "$out_dir/rootfs.ext4"
step "wrote $out_dir/initramfs.cpio ($(stat -c %s "$out_dir/initramfs.cpio") bytes) and $out_dir/rootfs.ext4 ($size_mib MiB, $(du -k "$out_dir/rootfs.ext4" | cut -f1) KiB used)"
echo "$out_dir/initramfs.cpio"
echo "$out_dir/rootfs.ext4"
