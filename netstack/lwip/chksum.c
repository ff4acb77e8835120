/*
 * chksum.c: the Internet checksum for lwIP (LWIP_CHKSUM, see arch/cc.h).
 *
 * lwIP's own lwip_standard_chksum() adds 16 bits per step; checksums were
 * 40% of abox-net's CPU time in a bulk TCP transfer at MTU 65520 (profiled
 * with perf; see docs/benchmarks.md). This one adds 64 bits per step with
 * the carry kept, four words per loop, and folds at the end: the one's
 * complement sum does not depend on the word size (2^16 = 1 mod 0xFFFF).
 *
 * Same contract as lwip_standard_chksum(): the non-inverted one's complement
 * sum of the bytes taken as 16-bit words in memory order from dataptr (any
 * alignment; a last odd byte is padded with a zero after it), folded to 16
 * bits, as the host reads it. Loads go through memcpy: no alignment or
 * aliasing assumptions.
 */
#include <stdint.h>
#include <string.h>

#include "lwip/arch.h"

static uint64_t load64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* Adds v to sum, and the carry out of bit 63 back in at bit 0 (end-around
   carry: one's complement addition). */
static uint64_t add_carry(uint64_t sum, uint64_t v) {
  sum += v;
  return sum + (sum < v);
}

u16_t abox_lwip_chksum(const void* dataptr, int len) {
  const uint8_t* p = (const uint8_t*)dataptr;
  size_t n = len > 0 ? (size_t)len : 0;
  uint64_t sum = 0;
  while (n >= 32) {
    sum = add_carry(sum, load64(p));
    sum = add_carry(sum, load64(p + 8));
    sum = add_carry(sum, load64(p + 16));
    sum = add_carry(sum, load64(p + 24));
    p += 32;
    n -= 32;
  }
  while (n >= 8) {
    sum = add_carry(sum, load64(p));
    p += 8;
    n -= 8;
  }
  /* The last 0..7 bytes, zero-padded after them: a whole number of 16-bit
     words in memory order, like the rest. */
  if (n > 0) {
    uint8_t tail[8] = {0};
    memcpy(tail, p, n);
    sum = add_carry(sum, load64(tail));
  }
  /* Fold 64 -> 32 -> 16 bits, carries added back in each time. */
  uint64_t s = (sum & 0xFFFFFFFFu) + (sum >> 32);
  s = (s & 0xFFFFFFFFu) + (s >> 32);
  s = (s & 0xFFFFu) + (s >> 16);
  s = (s & 0xFFFFu) + (s >> 16);
  s = (s & 0xFFFFu) + (s >> 16);
  return (u16_t)s;
}
