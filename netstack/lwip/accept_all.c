/*
 * accept_all.c: the hooks behind accept-all.patch (see abox_lwip.h).
 *
 * - The SYN verdict: tcp_listen_input() (patched) asks it for every new SYN at
 *   an accept-all listener, before a pcb exists or anything is sent.
 * - The IPv4 and IPv6 input hooks: ICMP(v6) not addressed to the netif itself
 *   is eaten, so that accept-all does not make lwIP answer pings for every
 *   address.
 * - The UDP destination port of the datagram being delivered.
 */
#include "abox_lwip.h"
#include "lwip/ip.h"
#include "lwip/netif.h"
#include "lwip/pbuf.h"
#include "lwip/prot/ip4.h"
#include "lwip/prot/ip6.h"
#include "lwip/prot/udp.h"
#include "lwip/tcp.h"

/* init.c's TCP sanity checks are off (lwipopts.h: the TCP_SNDLOWAT one cannot
   pass with TCP_MSS 65480). The ones that still mean something: */
#if TCP_SND_BUF < (2 * TCP_MSS)
#error "TCP_SND_BUF must be at least 2 * TCP_MSS"
#endif
#if TCP_SND_QUEUELEN < (2 * (TCP_SND_BUF / TCP_MSS))
#error "TCP_SND_QUEUELEN must be at least 2 * TCP_SND_BUF / TCP_MSS"
#endif
#if TCP_SND_QUEUELEN > 0xFFFF
#error "TCP_SND_QUEUELEN must fit a u16"
#endif
#if TCP_SNDLOWAT >= TCP_SND_BUF
#error "TCP_SNDLOWAT must be less than TCP_SND_BUF"
#endif
#if TCP_SNDQUEUELOWAT >= TCP_SND_QUEUELEN
#error "TCP_SNDQUEUELOWAT must be less than TCP_SND_QUEUELEN"
#endif
#if TCP_WND < TCP_MSS
#error "TCP_WND must be at least TCP_MSS"
#endif
#if TCP_MSS > 0xFFFF - 40 - 14
#error "TCP_MSS + 40 + the Ethernet header must fit a u16 pbuf length"
#endif
#if PBUF_POOL_BUFSIZE > 0xFFFF
#error "PBUF_POOL_BUFSIZE must fit a u16"
#endif
#if (SOF_ABOX_ACCEPT_ALL & (SOF_REUSEADDR | SOF_KEEPALIVE | SOF_BROADCAST)) != 0
#error "SOF_ABOX_ACCEPT_ALL must be a bit lwIP does not use"
#endif

static abox_lwip_syn_hook_fn syn_hook; /* NULL: accept */
static abox_lwip_counters_t counters;

void abox_lwip_set_syn_hook(abox_lwip_syn_hook_fn hook) {
  syn_hook = hook;
}

const abox_lwip_counters_t* abox_lwip_counters(void) {
  return &counters;
}

void abox_lwip_count_tcp_retransmit_timeout(void) {
  counters.tcp_retransmit_timeouts++;
}

void abox_lwip_count_tcp_fast_retransmit(void) {
  counters.tcp_fast_retransmits++;
}

abox_lwip_syn_verdict_t abox_lwip_syn_verdict(void* listener_arg, const ip_addr_t* src, u16_t src_port,
                                              const ip_addr_t* dst, u16_t dst_port) {
  if (syn_hook == NULL) return ABOX_LWIP_SYN_ACCEPT;
  /* The hook counts its own verdicts (abox-net: GuestStack::on_syn()). */
  abox_lwip_syn_verdict_t verdict = syn_hook(listener_arg, src, src_port, dst, dst_port);
  LWIP_ASSERT("SYN hook returned an unknown verdict", verdict == ABOX_LWIP_SYN_ACCEPT ||
                                                          verdict == ABOX_LWIP_SYN_DROP ||
                                                          verdict == ABOX_LWIP_SYN_RESET);
  return verdict;
}

u16_t abox_lwip_udp_current_dest_port(void) {
  /* udp_input() checked that the UDP header is in the pbuf right after the IP
     header (p->len >= UDP_HLEN), and the pbuf lives until the callback returns. */
  LWIP_ASSERT("abox_lwip_udp_current_dest_port: outside a UDP recv callback",
              (ip4_current_header() != NULL || ip6_current_header() != NULL) &&
                  ip_current_header_proto() == IP_PROTO_UDP);
  const struct udp_hdr* udp = (const struct udp_hdr*)ip_next_header_ptr();
  return lwip_ntohs(udp->dest);
}

int abox_lwip_ip4_input_hook(struct pbuf* p, struct netif* inp) {
  /* Runs before ip4_input() checks lengths: look at the fixed header only, and
     only when it is all in the first pbuf; lwIP drops anything shorter. */
  if (p->len < IP_HLEN) return 0;
  const struct ip_hdr* iphdr = (const struct ip_hdr*)p->payload;
  if (IPH_PROTO(iphdr) != IP_PROTO_ICMP) return 0;
  ip4_addr_t dest;
  ip4_addr_copy(dest, iphdr->dest);
  if (ip4_addr_cmp(&dest, netif_ip4_addr(inp))) return 0;
  counters.icmp_not_for_netif++;
  pbuf_free(p);
  return 1;
}

int abox_lwip_ip6_input_hook(struct pbuf* p, struct netif* inp) {
  /* Runs before ip6_input() checks lengths: the fixed header only, and only
     when it is all in the first pbuf. The next header is the fixed header's:
     ICMPv6 behind extension headers never gets here (the driver refuses a
     guest's extension headers before lwIP, ipv6_guest_checks.h). */
  if (p->len < IP6_HLEN) return 0;
  const struct ip6_hdr* ip6hdr = (const struct ip6_hdr*)p->payload;
  if (IP6H_NEXTH(ip6hdr) != IP6_NEXTH_ICMP6) return 0;
  ip6_addr_t dest;
  ip6_addr_copy_from_packed(dest, ip6hdr->dest);
  ip6_addr_clear_zone(&dest);
  if (ip6_addr_ismulticast(&dest)) return 0; /* lwIP's own multicast rules */
  for (u8_t i = 0; i < LWIP_IPV6_NUM_ADDRESSES; i++) {
    if (ip6_addr_isvalid(netif_ip6_addr_state(inp, i)) &&
        ip6_addr_cmp_zoneless(&dest, netif_ip6_addr(inp, i))) {
      return 0;
    }
  }
  counters.icmp_not_for_netif++;
  pbuf_free(p);
  return 1;
}
