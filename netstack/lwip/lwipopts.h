/*
 * lwipopts.h: abox's configuration of lwIP 2.1.3 (see ../../../shared/design/LWIP.md
 * for the measurements behind the numbers).
 *
 * One lwIP per abox-net process, driven by one thread: NO_SYS=1, raw API only,
 * IPv4 and IPv6, Ethernet + ARP + ND towards the guest. Memory comes from
 * malloc, uncounted by lwIP: every table the guest can grow (flows, half-open
 * connections, buffered bytes) is capped by abox's flow table from the policy,
 * not by compile-time pool sizes. What lwIP itself could grow without bound on
 * guest input (out-of-order data) is capped here.
 *
 * Accept-all: the guest may open a flow to any address; accept-all.patch and the
 * SOF_ABOX_ACCEPT_ALL / ABOX_LWIP_ACCEPT_ALL_IP4 definitions below make lwIP take
 * it, and admission decides (abox_lwip.h).
 */
#ifndef ABOX_NETSTACK_LWIP_LWIPOPTS_H
#define ABOX_NETSTACK_LWIP_LWIPOPTS_H

/* ---- System: one thread, no OS layer ---------------------------------- */
#define NO_SYS 1
#define SYS_LIGHTWEIGHT_PROT 0 /* single thread: nothing to protect */
#define LWIP_TIMERS 1          /* sys_check_timeouts() from our event loop */
#define LWIP_SOCKET 0
#define LWIP_NETCONN 0
#define LWIP_NETIF_API 0
#define LWIP_ALTCP 0

/* lwIP's def.h would otherwise #define htons/ntohs/htonl/ntohl as macros, which
   breaks any of our files that include both lwIP and <arpa/inet.h>. */
#define LWIP_DONT_PROVIDE_BYTEORDER_FUNCTIONS 1

/* ---- Memory: malloc-backed --------------------------------------------- */
#define MEM_LIBC_MALLOC 1
/* Pools are malloc-backed too: the number of pcbs, segments and pbufs is limited
   by abox's flow table (sized from the policy at run time), not here. With this
   on, lwIP skips its MEMP_NUM_* checks and the MEMP_NUM_* values are unused. */
#define MEMP_MEM_MALLOC 1
#define MEM_ALIGNMENT 8 /* 64-bit CPU; malloc already gives 16 */

/* Only a driver that asks for PBUF_POOL pbufs uses these. The default size
   (TCP_MSS + headers) silently overflows a u16 with our TCP_MSS (LWIP.md), so
   it is set explicitly. The count has no effect with MEMP_MEM_MALLOC; it is kept
   small so that turning MEMP_MEM_MALLOC off never reserves megabytes. */
#define PBUF_POOL_BUFSIZE 2048
#define PBUF_POOL_SIZE 16

/* ---- Protocols ---------------------------------------------------------- */
#define LWIP_IPV4 1
#define LWIP_IPV6 1
/* IPv6 (issue 21): lwIP only terminates flows. The guest's link is configured
   by abox-net's NdpResponder (RA, answers for the gateway), not by lwIP: lwIP
   sends no router solicitation, runs no DAD or SLAAC, joins no MLD group and
   takes no RA; its two addresses (fe80::1 and the instance's PREFIX::1) are
   set PREFERRED at start (guest_stack.cc). Its ND still resolves the guest's
   MAC: a solicitation from its address in the guest's /64 (PREFIX::1, or
   fe80::1 for a link-local guest address), whose advertisement the driver
   passes on.
   No reassembly; fragmentation as for IPv4 (below). */
#define LWIP_IPV6_NUM_ADDRESSES 2
#define LWIP_IPV6_AUTOCONFIG 0
#define LWIP_IPV6_SEND_ROUTER_SOLICIT 0
#define LWIP_IPV6_DUP_DETECT_ATTEMPTS 0
#define LWIP_IPV6_MLD 0
#define LWIP_IPV6_DHCP6 0
#define LWIP_IPV6_FORWARD 0
#define LWIP_IPV6_REASS 0
#define LWIP_IPV6_FRAG 1 /* see IP_FRAG below */
#define LWIP_ND6_ALLOW_RA_UPDATES 0
#define LWIP_ND6_TCP_REACHABILITY_HINTS 1
/* While the guest's MAC is being resolved, one packet waits (the newest), as
   with ARP_QUEUEING 0: with MEMP_MEM_MALLOC, lwIP's queue of them would have
   no bound, and a guest that stops answering solicitations could make it
   hold every segment lwIP sends it meanwhile. TCP retransmits the rest. */
#define LWIP_ND6_QUEUEING 0
#define LWIP_ICMP6 1 /* nd6.c needs it; echo only for lwIP's own addresses (hook) */
#define LWIP_IPV6_SCOPES 0
#define LWIP_ARP 1
#define LWIP_ETHERNET 1
/* lwIP answers ARP only for its own address; the driver answers for the rest
   of the guest's subnet (LWIP.md). */
#define ARP_QUEUEING 0
#define LWIP_ICMP 1 /* echo replies from the gateway address, port unreachable */
#define LWIP_RAW 0
#define LWIP_UDP 1
#define LWIP_TCP 1
#define LWIP_DHCP 0
#define LWIP_AUTOIP 0
#define LWIP_IGMP 0
#define LWIP_DNS 0
/* No reassembly: the guest's MTU is ours to set, and fragments of guest
   traffic are dropped. Fragmentation on (IPv4 and IPv6): a host datagram
   larger than the guest's MTU reaches it in fragments, as it would through a
   router (a UDP flow's from_host()). Never TCP (accept-all.patch): a segment
   over the MTU is a TSO one. Buffers: each fragment is a small header pbuf
   plus PBUF_REFs into the datagram (LWIP_NETIF_TX_SINGLE_PBUF 0), malloc'd
   like every pool (MEMP_NUM_FRAG_PBUF unused), and all freed before
   ip4_frag()/ip6_frag() returns: output_frame() copies each frame out. */
#define IP_REASSEMBLY 0
#define IP_FRAG 1

/* ---- Checksums ----------------------------------------------------------- */
/* All generated and checked in software for now. Per-netif control lets the
   driver skip the receive check for a frame the kernel already verified (vnet
   header DATA_VALID) by setting the netif's flags around netif->input(): the
   check was half of lwIP's CPU time at MTU 65520 (LWIP.md). */
#define LWIP_CHECKSUM_CTRL_PER_NETIF 1
#define CHECKSUM_GEN_IP 1
#define CHECKSUM_GEN_UDP 1
#define CHECKSUM_GEN_TCP 1
#define CHECKSUM_GEN_ICMP 1
#define CHECKSUM_CHECK_IP 1
#define CHECKSUM_CHECK_UDP 1
#define CHECKSUM_CHECK_TCP 1
#define CHECKSUM_CHECK_ICMP 1

/* ---- TCP ----------------------------------------------------------------- */
/* TCP_MSS is compiled in and a u16. 65480 = MTU 65520 - 40: the largest that
   fits with the Ethernet header in a u16 pbuf. It is only an upper bound: lwIP
   advertises min(TCP_MSS, netif MTU - 40) and sends min(ours, the peer's), so an
   MTU-1500 guest still gets 1460. */
#define TCP_MSS 65480
#define TCP_CALCULATE_EFF_SEND_MSS 1

/* 4 MiB windows: one flow used 2-7 MB RSS with them (LWIP.md). A window above
   64 KiB needs window scaling, and TCP_WND <= 0xFFFF << TCP_RCV_SCALE: 4 MiB
   needs scale 7 (at most 8 MiB - 128). */
#define LWIP_WND_SCALE 1
#define TCP_RCV_SCALE 7
#define TCP_WND (4 * 1024 * 1024)

/* The send buffer matches the window. tcp_write() still takes u16 lengths. */
#define TCP_SND_BUF (4 * 1024 * 1024)
/* TCP_SND_QUEUELEN counts pbufs, and a no-copy segment uses 2 (LWIP.md). Sized
   for the smallest MSS we expect at full buffer: 2 * 4 MiB / 1460 = 5746. With
   a smaller MSS the queue fills first and tcp_write() returns ERR_MEM, which is
   backpressure, not failure. Must fit a u16. */
#define TCP_SND_QUEUELEN 6144
/* Only the netconn/socket layers (not built) read TCP_SNDLOWAT and
   TCP_SNDQUEUELOWAT. Kept small and valid anyway. */
#define TCP_SNDLOWAT (2 * 1460)
#define TCP_SNDQUEUELOWAT (TCP_SND_QUEUELEN / 2)
/* init.c's TCP sanity checks cannot pass with TCP_MSS 65480: "TCP_SNDLOWAT must
   be 4*MSS below u16 overflow" compares against 0xFFFF - 4 * 65480 < 0, a
   leftover from u16 send buffers (LWIP_WND_SCALE makes them u32). They are off
   knowingly; the ones that still mean something are restated in accept_all.c. */
#define LWIP_DISABLE_TCP_SANITY_CHECKS 1

/* Copying tcp_write() may allocate up to TCP_OVERSIZE bytes ahead (default:
   TCP_MSS = 64 KiB per small write) and mem_trim() does nothing with
   MEM_LIBC_MALLOC (LWIP.md): keep it to one Ethernet-sized segment. The data
   path writes no-copy, which never over-allocates. */
#define TCP_OVERSIZE 1460

/* Out-of-order data: 50 concurrent senders once reached 148 MB RSS (LWIP.md).
   Per flow at most 1 MiB (bytes bound it for full-size segments) in at most 1024
   pbufs (bounds the per-pbuf overhead when a guest sends tiny segments). Past
   either, lwIP drops out-of-order segments and the guest retransmits. */
#define TCP_QUEUE_OOSEQ 1
#define TCP_OOSEQ_MAX_BYTES (1024 * 1024)
#define TCP_OOSEQ_MAX_PBUFS 1024

/* No listen backlog: one accept-all listener takes every flow, and half-open
   connections are capped by the flow table through the SYN verdict. lwIP's
   backlog counter is a u8, far too small for that listener anyway. */
#define TCP_LISTEN_BACKLOG 0
/* One extension argument per pcb: the admission decided at a flow's SYN
   rides on its pcb until the accept callback takes it, and is freed with the
   pcb if the handshake never completes (guest_stack.cc). */
#define LWIP_TCP_PCB_NUM_EXT_ARGS 1
#define LWIP_TCP_KEEPALIVE 0
#define LWIP_CALLBACK_API 1
#define LWIP_EVENT_API 0

/* ---- Netif --------------------------------------------------------------- */
/* The link is up as long as abox-net runs; no link or status callbacks. */
#define LWIP_NETIF_LINK_CALLBACK 0
#define LWIP_NETIF_STATUS_CALLBACK 0
#define LWIP_NETIF_HOSTNAME 0
#define LWIP_NETIF_LOOPBACK 0
#define LWIP_HAVE_LOOPIF 0

/* ---- Statistics ---------------------------------------------------------- */
/* abox counts its own drops (STYLE.md: every drop has a named counter). */
#define LWIP_STATS 0

/* ---- Accept-all (accept-all.patch) ---------------------------------------- */
/* A pcb option bit lwIP 2.1.3 does not use (SOF_* are 0x04, 0x08, 0x20): a TCP
   listener or UDP pcb with it takes every segment or datagram that nothing else
   matched, whatever the destination address and port. Not inherited by
   accepted pcbs (SOF_INHERITED). Set with ip_set_option(pcb, SOF_ABOX_ACCEPT_ALL)
   before tcp_listen(). */
#define SOF_ABOX_ACCEPT_ALL 0x80U
/* ip4_input_accept() takes every unicast destination. */
#define ABOX_LWIP_ACCEPT_ALL_IP4 1
/* ip6_input_accept() takes every unicast destination. */
#define ABOX_LWIP_ACCEPT_ALL_IP6 1

/* Our hook declarations, included by lwIP's .c files after their own headers. */
#define LWIP_HOOK_FILENAME "abox_lwip.h"
/* With accept-all, lwIP would answer pings to every address and fake
   reachability (LWIP.md): ICMP not addressed to the netif itself is dropped
   before lwIP sees it. The driver answers (or refuses) those itself. */
#define LWIP_HOOK_IP4_INPUT(pbuf, input_netif) abox_lwip_ip4_input_hook((pbuf), (input_netif))
/* The same for ICMPv6 to a unicast address that is not one of the netif's:
   lwIP answers echo for fe80::1 and PREFIX::1 only. */
#define LWIP_HOOK_IP6_INPUT(pbuf, input_netif) abox_lwip_ip6_input_hook((pbuf), (input_netif))

/* ---- Debugging ------------------------------------------------------------ */
/* LWIP_DEBUG stays off; assertions stay on (arch/cc.h: message, then abort). */

#endif /* ABOX_NETSTACK_LWIP_LWIPOPTS_H */
