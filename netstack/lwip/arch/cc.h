/*
 * arch/cc.h: lwIP's compiler and platform port for abox (Linux, GCC or clang,
 * x86-64 or any little- or big-endian 64-bit target).
 *
 * Types: lwIP's arch.h takes u8_t..u32_t, mem_ptr_t and the printf formats from
 * <stdint.h> and <inttypes.h> (LWIP_NO_STDINT_H and LWIP_NO_INTTYPES_H stay 0),
 * and packs its header structs with __attribute__((packed)) on GCC and clang.
 */
#ifndef ABOX_NETSTACK_LWIP_ARCH_CC_H
#define ABOX_NETSTACK_LWIP_ARCH_CC_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Byte order from the compiler. lwIP's arch.h defines LITTLE_ENDIAN (1234) and
   BIG_ENDIAN (4321) before including this file, with glibc's values. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#ifndef BYTE_ORDER
#define BYTE_ORDER LITTLE_ENDIAN
#endif
/* One instruction instead of lwIP's shift-and-or functions (def.c). */
#define lwip_htons(x) ((u16_t)__builtin_bswap16((u16_t)(x)))
#define lwip_htonl(x) ((u32_t)__builtin_bswap32((u32_t)(x)))
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#ifndef BYTE_ORDER
#define BYTE_ORDER BIG_ENDIAN
#endif
#else
#error "abox's lwIP port needs __BYTE_ORDER__ (GCC or clang)"
#endif

/* A broken lwIP invariant is an assertion (STYLE.md, errors in tiers): say
   where, then abort. */
#define LWIP_PLATFORM_ASSERT(message)                                                        \
  do {                                                                                       \
    fprintf(stderr, "lwIP assertion \"%s\" failed at %s:%d\n", message, __FILE__, __LINE__); \
    fflush(stderr);                                                                          \
    abort();                                                                                 \
  } while (0)

/* Debug output (LWIP_DEBUG builds only). lwIP passes a parenthesised printf
   argument list: LWIP_PLATFORM_DIAG(("fmt", args)). */
void abox_lwip_diag(const char* format, ...) __attribute__((format(printf, 1, 2)));
#define LWIP_PLATFORM_DIAG(args) \
  do {                           \
    abox_lwip_diag args;         \
  } while (0)

/* The Internet checksum, 64 bits per step (chksum.c); lwIP's own adds 16. */
uint16_t abox_lwip_chksum(const void* dataptr, int len);
#define LWIP_CHKSUM abox_lwip_chksum

/* Random numbers (initial local ports): see abox_lwip.h to inject a source. */
uint32_t abox_lwip_rand(void);
#define LWIP_RAND() abox_lwip_rand()

#ifdef __cplusplus
}
#endif

#endif /* ABOX_NETSTACK_LWIP_ARCH_CC_H */
