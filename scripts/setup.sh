#!/usr/bin/env bash
# setup.sh: make this machine able to build and test abox.
#
# Installs every Debian package the project needs (now and for the issues to
# come), brings lwIP 2.1.3's source from Debian's source package into
# .cache/lwip/, and Debian's cloud kernel (not installed: unpacked) into
# .cache/guest-kernel/ for the VM tests (see guest/README.md). Idempotent: when nothing is missing it prints nothing and
# touches nothing, so it also works offline once everything is there.
#
# Exit codes: 0 ready; 2 not a Debian machine, or not root while something is
# missing (the message says what); 1 an install step failed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="$root/.cache"

# Build tools and libraries (linked or included by our targets). The static
# abox-net (ABOX_STATIC_NET) links the .a files these -dev packages ship
# (libc6-dev and libstdc++-12-dev come with build-essential). libssl-dev:
# ldns's OpenSSL headers, for the tests that decode with ldns.
build_pkgs=(
  build-essential cmake ninja-build ccache pkg-config git
  clang libclang-rt-14-dev clang-format clang-tidy
  liburing-dev android-libboringssl-dev
  libldns-dev  # tests and the dns_answer fuzz target only: an independent DNS decoder
  # libnl: abox-helper's tap devices (helper/tap_devices.cc; abox-net
  # speaks rtnetlink itself, netstack/link/rtnetlink.cc). Boost: header-only
  # Asio for the engine's control plane, the daemon and the shim.
  libnl-3-dev libnl-route-3-dev libboost1.81-dev
  libseccomp-dev  # the sandboxes' syscall filter (io/syscall_filter.cc: abox-net, the broker)
  libgtest-dev libgmock-dev libbenchmark-dev libtomlplusplus-dev libssl-dev
  dpkg-dev
)
# Real peers the tests and benchmarks start: DNS servers and clients, web
# servers, traffic tools, the peers we compare against, and QEMU for VM tests.
peer_pkgs=(
  python3 iproute2 procps
  unbound nsd dnsmasq-base dnsutils ldnsutils dnsperf
  nginx-light curl wrk iperf3 socat tcpdump strace
  iputils-ping  # ping from the guest: echo flows (netstack_e2e.py, ipv6_flows_e2e.py)
  passt slirp4netns python3-scapy
  qemu-system-x86 busybox-static cpio lz4
  debootstrap e2fsprogs  # the Debian agent image (guest/image/debian/build.sh)
)

need_cmds() {
  cat >&2 <<MSG
abox's setup script knows Debian 12 (bookworm) only. On this machine, install
by hand: a C++20 compiler (g++ 12 or clang 14+), CMake 3.25+, Ninja, liburing,
BoringSSL, libnl-3 and libnl-route-3, libseccomp, Boost 1.81 headers, GoogleTest,
Google Benchmark, toml++ 3, clang-format 14, ldns (tests only), and lwIP 2.1.3's source unpacked
at $cache/lwip/src (with src/core/tcp.c inside). For the tests also: unbound,
nsd, dnsmasq, dig, drill, dnsperf, nginx, curl, wrk, iperf3, socat, tcpdump, pasta,
slirp4netns, scapy and qemu-system-x86.
MSG
}

if [[ ! -r /etc/os-release ]] || ! grep -qE '^(ID|ID_LIKE)=.*debian' /etc/os-release; then
  if [[ -f "$cache/lwip/src/core/tcp.c" ]] && command -v cmake >/dev/null; then
    exit 0 # prepared by hand; let the build say what else is missing
  fi
  need_cmds
  exit 2
fi

missing=()
for p in "${build_pkgs[@]}" "${peer_pkgs[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == installed ]] || missing+=("$p")
done

lwip_ok() { [[ -f "$cache/lwip/src/core/tcp.c" && -f "$cache/lwip/VERSION" ]]; }

# The VM tests' guest kernel: the PVH vmlinux of Debian's cloud kernel and the
# modules guest/modules.list and the images' own lists name, flat in modules/.
guest_kernel="$cache/guest-kernel"
guest_modules() { cat "$root/guest/modules.list" "$root"/guest/image/*/modules.list | grep -v -e '^#' -e '^$'; }
guest_kernel_has_modules() {
  local m
  for m in $(guest_modules); do
    [[ -f "$guest_kernel/modules/${m##*/}" ]] || return 1
  done
}
guest_kernel_ok() {
  [[ -s "$guest_kernel/vmlinux" && -f "$guest_kernel/VERSION" ]] && guest_kernel_has_modules
}

if ((${#missing[@]} == 0)) && lwip_ok && guest_kernel_ok; then
  exit 0
fi

if ((EUID != 0)); then
  what="${missing[*]:-}"
  lwip_ok || what+=" (and lwIP's source)"
  guest_kernel_ok || what+=" (and the guest kernel)"
  echo "setup: need root to install: $what" >&2
  echo "setup: run it again as root (sudo $0)" >&2
  exit 2
fi

export DEBIAN_FRONTEND=noninteractive
apt_updated=0
apt_update() {
  if ((apt_updated == 0)); then
    echo "setup: apt-get update" >&2
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
}

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}" >&2
  # Services that packages would start (unbound, nginx, nsd) are not wanted:
  # tests start their own instances on loopback with their own configs.
  policy_rc=/usr/sbin/policy-rc.d
  made_policy=0
  if [[ ! -e $policy_rc ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy_rc" && chmod +x "$policy_rc" && made_policy=1
  fi
  apt_update
  apt-get install -y -qq -o=Dpkg::Use-Pty=0 --no-install-recommends "${missing[@]}" >/dev/null || {
    ((made_policy)) && rm -f "$policy_rc"
    echo "setup: apt-get install failed for: ${missing[*]}" >&2
    exit 1
  }
  ((made_policy)) && rm -f "$policy_rc"
  # Package scripts may have started daemons regardless; stop the ones that
  # would hold ports our tests use.
  for svc in unbound nsd nginx; do pkill -x "$svc" 2>/dev/null || true; done
fi

if ! lwip_ok; then
  # lwIP comes from Debian's source package, with deb-src in a file of its own
  # so the system's sources stay as they were.
  src_list=/etc/apt/sources.list.d/abox-deb-src.sources
  if [[ ! -f $src_list ]]; then
    cat >"$src_list" <<'SRC'
# Written by abox's scripts/setup.sh: source packages (for `apt-get source lwip`).
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt_updated=0
  fi
  apt_update
  tmp=$(mktemp -d)
  chmod 755 "$tmp" # apt's download user must be able to write here
  chown _apt "$tmp" 2>/dev/null || true
  trap 'rm -rf "$tmp" "${ktmp:-}"' EXIT
  echo "setup: fetching lwIP source (apt-get source lwip)" >&2
  (cd "$tmp" && apt-get source -qq --download-only lwip >/dev/null &&
    dpkg-source --no-check -x lwip_*.dsc lwip >/dev/null) || {
    echo "setup: could not fetch lwIP's source package" >&2
    exit 1
  }
  ver=$(cd "$tmp" && ls lwip_*.dsc | sed -E 's/^lwip_(.*)\.dsc$/\1/')
  case "$ver" in
    2.1.3*) ;;
    *) echo "setup: expected lwIP 2.1.3, Debian gave $ver" >&2; exit 1 ;;
  esac
  rm -rf "$cache/lwip"
  mkdir -p "$cache"
  mv "$tmp/lwip" "$cache/lwip"
  echo "$ver" >"$cache/lwip/VERSION"
fi

# A kernel that is there but lacks a module a list gained: the modules come
# from the same package version, added beside the others (each file moved in
# whole), so the vmlinux other checkouts sharing this cache boot stays as it is.
if ! guest_kernel_ok && [[ -s "$guest_kernel/vmlinux" && -f "$guest_kernel/VERSION" ]]; then
  kpkg=$(sed -n 's/^Package: //p' "$guest_kernel/VERSION")
  kversion=$(sed -n 's/^Version: //p' "$guest_kernel/VERSION")
  mtmp=$(mktemp -d)
  chmod 755 "$mtmp"
  chown _apt "$mtmp" 2>/dev/null || true
  echo "setup: adding modules to the guest kernel from $kpkg=$kversion" >&2
  if (cd "$mtmp" && { apt-get download -qq "$kpkg=$kversion" >/dev/null 2>&1 ||
    { apt_update && apt-get download -qq "$kpkg=$kversion" >/dev/null; }; } &&
    dpkg-deb -x "$kpkg"_*.deb pkg); then
    kver=${kpkg#linux-image-}
    for m in $(guest_modules); do
      f="$guest_kernel/modules/${m##*/}"
      [[ -f $f ]] && continue
      cp "$mtmp/pkg/lib/modules/$kver/kernel/$m" "$f.tmp" && mv "$f.tmp" "$f" || {
        echo "setup: $kpkg has no $m" >&2
        rm -rf "$mtmp"
        exit 1
      }
    done
  else
    echo "setup: $kpkg=$kversion is gone from the archive: fetching the current kernel whole" >&2
  fi
  rm -rf "$mtmp"
fi

if ! guest_kernel_ok; then
  # The current cloud kernel is whatever the metapackage depends on. It is
  # downloaded and unpacked, never installed: the host's boot stays as it was.
  resolve_kernel() {
    apt-cache depends linux-image-cloud-amd64 2>/dev/null |
      awk '/Depends: linux-image-[0-9].*-cloud-amd64$/ { print $2; exit }'
  }
  kpkg=$(resolve_kernel)
  if [[ -z $kpkg ]]; then
    apt_update
    kpkg=$(resolve_kernel)
  fi
  [[ -n $kpkg ]] || {
    echo "setup: apt knows no linux-image-cloud-amd64 (is this amd64 Debian?)" >&2
    exit 1
  }
  ktmp=$(mktemp -d)
  chmod 755 "$ktmp"
  chown _apt "$ktmp" 2>/dev/null || true
  trap 'rm -rf "${tmp:-}" "$ktmp"' EXIT
  echo "setup: fetching the guest kernel ($kpkg)" >&2
  (cd "$ktmp" && apt-get download -qq "$kpkg" >/dev/null && dpkg-deb -x "$kpkg"_*.deb pkg) || {
    echo "setup: could not download or unpack $kpkg" >&2
    exit 1
  }
  kver=${kpkg#linux-image-}
  mkdir -p "$ktmp/out/modules"
  # Why the vmlinux and not the bzImage: QEMU boots the ELF through its PVH
  # entry point, so the guest does not spend about half a second of TCG time
  # decompressing itself. The bzImage's payload is an LZ4 legacy frame: cut
  # it out at its magic (02 21 4c 18) and decompress it here.
  bz="$ktmp/pkg/boot/vmlinuz-$kver"
  off=$(LC_ALL=C grep -obUaP '\x02\x21\x4c\x18' "$bz" | head -1 | cut -d: -f1)
  if [[ -n $off ]]; then
    tail -c +$((off + 1)) "$bz" | lz4 -dc >"$ktmp/out/vmlinux" 2>/dev/null || true
  fi
  # lz4 complains about the bzImage's trailer after the frame; what counts is
  # an ELF with the PVH entry note (Xen ELF note type 0x12).
  readelf -n "$ktmp/out/vmlinux" 2>/dev/null | grep -q 'note type: (0x00000012)' || {
    echo "setup: no PVH vmlinux inside $bz" >&2
    exit 1
  }
  for m in $(guest_modules); do
    cp "$ktmp/pkg/lib/modules/$kver/kernel/$m" "$ktmp/out/modules/" || {
      echo "setup: $kpkg has no $m" >&2
      exit 1
    }
  done
  cp "$ktmp/pkg/boot/config-$kver" "$ktmp/out/config"
  dpkg-deb -f "$ktmp/$kpkg"_*.deb Package Version >"$ktmp/out/VERSION"
  rm -rf "$guest_kernel"
  mkdir -p "$cache"
  mv "$ktmp/out" "$guest_kernel"
fi
