/*
 * abox_lwip.h: what abox adds to lwIP 2.1.3 (C API; lwIP includes this file as
 * LWIP_HOOK_FILENAME, abox's C++ includes it as "netstack/lwip/abox_lwip.h").
 *
 * Accept-all (accept-all.patch, lwipopts.h): lwIP takes a flow to ANY
 * destination, and abox decides.
 * - TCP: one listener with SOF_ABOX_ACCEPT_ALL, e.g.
 *       struct tcp_pcb *pcb = tcp_new();
 *       ip_set_option(pcb, SOF_ABOX_ACCEPT_ALL);
 *       pcb = tcp_listen(pcb);          (unbound: IP_ANY, port 0)
 *       tcp_arg(pcb, ctx); tcp_accept(pcb, on_accept);
 *   takes every SYN that no connection and no other listener matched. Before
 *   anything is allocated or sent, the SYN hook (below) says accept, drop or
 *   reset. An accepted pcb's local_ip/local_port are the original destination.
 *   lwIP completes the handshake itself: on_accept runs after the guest's ACK.
 * - UDP: a pcb with SOF_ABOX_ACCEPT_ALL, bound (any port) and given a recv
 *   callback, takes every unicast datagram no other pcb matched. In the
 *   callback, ip_current_dest_addr() and abox_lwip_udp_current_dest_port() are
 *   the original destination. To answer from that destination, bind a pcb to
 *   it (udp_bind to the foreign address and port works) and send with
 *   udp_sendto_if_src(); udp_sendto() refuses a source that is not the
 *   netif's own address (ERR_RTE).
 * - ICMP addressed to anything but the netif's own address never reaches lwIP
 *   (abox_lwip_ip4_input_hook, abox_lwip_ip6_input_hook), so lwIP answers
 *   pings for the gateway only.
 * - IPv6 the same way (ABOX_LWIP_ACCEPT_ALL_IP6): lwIP's ip_addr_t is dual
 *   stack (IP_IS_V6() tells), and the same listener and UDP pcb take both.
 *
 * Deterministic mode (STYLE.md): the clock and the random source can be
 * injected, best before abox_lwip_init_once() (the random source is read by
 * lwip_init()); a clock replaced later takes lwIP's timers with it.
 *
 * Everything here runs on lwIP's one thread; nothing is locked.
 */
#ifndef ABOX_NETSTACK_LWIP_ABOX_LWIP_H
#define ABOX_NETSTACK_LWIP_ABOX_LWIP_H

#include "lwip/arch.h"
#include "lwip/ip_addr.h"

#ifdef __cplusplus
extern "C" {
#endif

struct netif;
struct pbuf;

/* ---- SYN verdict ---------------------------------------------------------- */

/* What happens to a new SYN at an accept-all listener. */
typedef enum abox_lwip_syn_verdict_t {
  /* Allocate a pcb and answer SYN-ACK now (lwIP's normal path). */
  ABOX_LWIP_SYN_ACCEPT = 0,
  /* Send nothing; the guest will retransmit the SYN. */
  ABOX_LWIP_SYN_DROP = 1,
  /* Answer RST+ACK from the original destination ("connection refused"). */
  ABOX_LWIP_SYN_RESET = 2,
} abox_lwip_syn_verdict_t;

/* listener_arg: the listener's tcp_arg(). src/dst: the guest and the original
   destination (ports in host byte order). Runs inside tcp_input(): keep it to a
   decision; it must not create, close or abort pcbs. */
typedef abox_lwip_syn_verdict_t (*abox_lwip_syn_hook_fn)(void* listener_arg, const ip_addr_t* src,
                                                         u16_t src_port, const ip_addr_t* dst,
                                                         u16_t dst_port);

/* "Connect upstream first, then SYN-ACK" needs no third verdict: answer DROP
   and keep a copy of the SYN's frame, connect upstream, then feed the frame to
   netif->input again and answer ACCEPT (connected) or RESET (refused). The
   guest's own SYN retransmissions arrive meanwhile and are answered DROP. */

/* Installs the SYN hook; NULL (the default) accepts every SYN. The hook
   counts its verdicts itself: the glue only passes them on. */
void abox_lwip_set_syn_hook(abox_lwip_syn_hook_fn hook);

/* Called by the patched tcp_listen_input(); not for abox's code. */
abox_lwip_syn_verdict_t abox_lwip_syn_verdict(void* listener_arg, const ip_addr_t* src, u16_t src_port,
                                              const ip_addr_t* dst, u16_t dst_port);

/* ---- UDP ------------------------------------------------------------------- */

/* The destination port of the UDP datagram being delivered, in host byte order.
   Only valid inside a UDP recv callback (like ip_current_dest_addr()). */
u16_t abox_lwip_udp_current_dest_port(void);

/* ---- IPv4 input hook ------------------------------------------------------ */

/* LWIP_HOOK_IP4_INPUT: eats (frees) ICMP not addressed to the netif's own
   address and returns 1; returns 0 for everything else. Reads only the fixed
   IPv4 header, after checking it is all in the first pbuf. */
int abox_lwip_ip4_input_hook(struct pbuf* p, struct netif* inp);

/* ---- IPv6 input hook ------------------------------------------------------ */

/* LWIP_HOOK_IP6_INPUT: eats (frees) ICMPv6 to a unicast address that is not
   one of the netif's valid addresses and returns 1; returns 0 for everything
   else (multicast keeps lwIP's rules). Reads only the fixed IPv6 header, after
   checking it is all in the first pbuf. */
int abox_lwip_ip6_input_hook(struct pbuf* p, struct netif* inp);

/* What happens inside this glue and lwIP's TCP, for abox-net's counters
   (lwIP's own statistics are off, LWIP_STATS 0). Every TCP pcb of lwIP's is
   a connection with the guest, so the retransmissions are all to the guest. */
typedef struct abox_lwip_counters_t {
  u64_t icmp_not_for_netif; /* ICMP(v6) to a foreign address, eaten by the input hooks */
  /* lwIP's retransmission timer fired and it sent again everything the guest
     had not acknowledged (and a SYN-ACK resent by the timer or on a stray ACK) */
  u64_t tcp_retransmit_timeouts;
  /* lwIP sent the first unacknowledged segment again: three duplicate ACKs
     from the guest (fast retransmit), or a SYN-ACK resent on a repeated SYN */
  u64_t tcp_fast_retransmits;
} abox_lwip_counters_t;
const abox_lwip_counters_t* abox_lwip_counters(void);

/* Called by the patched tcp_rexmit_rto_commit() and tcp_rexmit()
   (tcp_out.c); not for abox's code. */
void abox_lwip_count_tcp_retransmit_timeout(void);
void abox_lwip_count_tcp_fast_retransmit(void);

/* ---- Initialisation, clock and random source ------------------------------- */

/* lwip_init(), the first time only: lwIP is process-global, and a second
   lwip_init() would start its cyclic timers a second time. Every user of
   lwIP in a process (GuestStack, tests, fuzz targets) goes through this. */
void abox_lwip_init_once(void);

/* Milliseconds, any epoch, wrapping at 2^32 (lwIP's sys_now()). NULL, the
   default, reads CLOCK_MONOTONIC. Replacing the clock once lwIP is
   initialised moves its pending timeouts onto the new clock, each due as
   far ahead of the new clock's "now" as it was of the old one's. */
typedef u32_t (*abox_lwip_clock_fn)(void);
void abox_lwip_set_clock(abox_lwip_clock_fn now_ms);

/* Moves lwIP's pending timeouts so that the soonest is due ms from now and
   the others keep their distances from it; none of the ones overdue runs.
   For tests (tests/netstack/lwip/lwip_test_state.h): one fixture after
   another in one process, each starts as a fresh process does after
   lwip_init(), with no timer due at once (lwIP's cyclic ones are 1 s). */
void abox_lwip_defer_timers(u32_t ms);

/* NULL, the default, reads getrandom(2). lwIP uses it for its initial local
   ports only. */
typedef u32_t (*abox_lwip_rand_fn)(void);
void abox_lwip_set_rand(abox_lwip_rand_fn rand);

#ifdef __cplusplus
}
#endif

#endif /* ABOX_NETSTACK_LWIP_ABOX_LWIP_H */
