#!/bin/busybox sh
# /init of abox's test guest: a busybox initramfs for Debian's cloud kernel
# under QEMU microvm (see guest/README.md).
#
# Boot: mount the kernel filesystems, load the modules listed in
# /etc/modules (in that order: there is no modprobe, no modules.dep), lease
# eth0 by DHCP from the gateway, then serve the control port until the host
# says "poweroff" or closes it, and power off. It never returns: an /init that
# exits panics the kernel.
#
# Control port: the virtio-serial port named by abox.ctl= on the kernel
# command line (default "ctl"), seen as /dev/virtio-ports/<name>. Guest ->
# host, one JSON object per line:
#   {"event":"ready","uptime":"1.93","dhcp":0}    once, when it is ready for
#                                                 commands (dhcp: udhcpc's exit code)
#   {"seq":N,"rc":R,"out":"BASE64","truncated":0} one per command
# Host -> guest, one line per command: a shell command line run by sh -c with
# stdin from /dev/null, stdout and stderr together, at most abox.cmd_timeout
# seconds (default 60; rc 124 or 143 when it ran out) and the first 64 KiB of
# output (truncated:1 when there was more). Base64 keeps any output on one
# line. "poweroff" answers rc 0 and powers off.
#
# The DHCP lease (what udhcpc was given) is in /run/lease.env as key=value.

/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox mkdir -p /run /tmp
export PATH=/bin:/sbin:/usr/bin:/usr/sbin

log() { echo "init: $*"; }

# abox.KEY=VALUE from the kernel command line, or $2.
option() {
  # shellcheck disable=SC2013 # the command line is words, not lines
  for word in $(cat /proc/cmdline); do
    case "$word" in "abox.$1="*) echo "${word#*=}"; return ;; esac
  done
  echo "$2"
}

halt() {
  log "powering off: $*"
  sync
  poweroff -f
  sleep 10 # poweroff -f does not return; if it did, panic rather than loop
  exit 1
}

while read -r module; do
  insmod "/lib/modules/$module" || log "insmod $module failed"
done </etc/modules

# No udev: name each virtio-serial port as udev would. QEMU announces ports
# after the driver is up, so the wanted one may come a moment after insmod.
ctl_name=$(option ctl ctl)
mkdir -p /dev/virtio-ports
tries=0
while [ ! -e "/dev/virtio-ports/$ctl_name" ] && [ $tries -lt 50 ]; do
  for port in /sys/class/virtio-ports/*; do
    [ -f "$port/name" ] || continue
    name=$(cat "$port/name")
    [ -n "$name" ] && [ -e "/dev/${port##*/}" ] && ln -sf "/dev/${port##*/}" "/dev/virtio-ports/$name"
  done
  [ -e "/dev/virtio-ports/$ctl_name" ] || sleep 0.1
  tries=$((tries + 1))
done

ip link set lo up
ip link set eth0 up || log "no eth0"
# -O mtu: udhcpc does not ask for the MTU unless told to.
udhcpc -i eth0 -f -q -n -t 5 -T 2 -O mtu -s /etc/udhcpc.script
dhcp=$?
log "udhcpc exit $dhcp"

ctl=/dev/virtio-ports/$ctl_name
cmd_timeout=$(option cmd_timeout 60)
[ -e "$ctl" ] || halt "no control port $ctl"
exec 3<>"$ctl"
read -r uptime _ </proc/uptime
echo "{\"event\":\"ready\",\"uptime\":\"$uptime\",\"dhcp\":$dhcp}" >&3
log "ready (uptime $uptime)"

seq=0
out_cap=65536
while read -r line <&3; do
  seq=$((seq + 1))
  if [ "$line" = poweroff ]; then
    echo "{\"seq\":$seq,\"rc\":0,\"out\":\"\",\"truncated\":0}" >&3
    break
  fi
  timeout "$cmd_timeout" sh -c "$line" </dev/null >/tmp/out 2>&1
  rc=$?
  truncated=0
  [ "$(wc -c </tmp/out)" -gt "$out_cap" ] && truncated=1
  out=$(head -c "$out_cap" /tmp/out | base64 -w 0)
  echo "{\"seq\":$seq,\"rc\":$rc,\"out\":\"$out\",\"truncated\":$truncated}" >&3
done
exec 3>&-
halt "control port closed or poweroff asked"
