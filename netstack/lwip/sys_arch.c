/*
 * sys_arch.c: the NO_SYS port of lwIP: sys_now(), LWIP_RAND() and debug
 * output. The clock and the random source can be replaced (abox_lwip.h) for
 * deterministic tests and fuzzing.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

#include "abox_lwip.h"
#include "lwip/init.h"
#include "lwip/sys.h"
#include "lwip/timeouts.h"

static abox_lwip_clock_fn clock_source; /* NULL: CLOCK_MONOTONIC */
static abox_lwip_rand_fn rand_source;   /* NULL: getrandom(2) */
static int lwip_initialised;            /* abox_lwip_init_once() ran */
static u32_t restart_offset;            /* added to sys_now() while timeouts are rebased */

void abox_lwip_init_once(void) {
  if (lwip_initialised) return;
  lwip_init();
  lwip_initialised = 1;
}

void abox_lwip_set_clock(abox_lwip_clock_fn now_ms) {
  /* The pending timeouts are times of the old clock: left there, a clock
     whose "now" is far from the old one makes them all due at once, or
     (after a wrap) in weeks, and lwIP's TCP, ARP and ND timers stop. So
     each keeps what it had left: sys_restart_timeouts() puts the soonest at
     sys_now() and the others at their distances from it, and sys_now() reads
     the new clock plus what the soonest had left on the old one. */
  u32_t left = SYS_TIMEOUTS_SLEEPTIME_INFINITE;
  if (lwip_initialised) left = sys_timeouts_sleeptime();
  clock_source = now_ms;
  if (left != SYS_TIMEOUTS_SLEEPTIME_INFINITE) {
    restart_offset = left;
    sys_restart_timeouts();
    restart_offset = 0;
  }
}

void abox_lwip_set_rand(abox_lwip_rand_fn rand) {
  rand_source = rand;
}

/* lwIP's timers compare times with wrap-around arithmetic, so truncating the
   millisecond count to 32 bits is what lwIP expects. */
static u32_t clock_now(void) {
  if (clock_source != NULL) return clock_source();
  struct timespec now;
  if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) {
    /* Cannot fail with a valid clock id and pointer. */
    LWIP_PLATFORM_ASSERT("clock_gettime(CLOCK_MONOTONIC) failed");
  }
  return (u32_t)((u64_t)now.tv_sec * 1000u + (u64_t)now.tv_nsec / 1000000u);
}

void abox_lwip_defer_timers(u32_t ms) {
  if (!lwip_initialised) return;
  restart_offset = ms;
  sys_restart_timeouts();
  restart_offset = 0;
}

u32_t sys_now(void) {
  return clock_now() + restart_offset;
}

uint32_t abox_lwip_rand(void) {
  if (rand_source != NULL) return rand_source();
  uint32_t value = 0;
  ssize_t got;
  do {
    got = getrandom(&value, sizeof value, 0);
  } while (got < 0 && errno == EINTR);
  if (got != (ssize_t)sizeof value) {
    /* Before the kernel's pool is ready, or a seccomp filter without
       getrandom: initial ports only need to differ between runs. */
    value = sys_now() * 2654435761u;
  }
  return value;
}

void abox_lwip_diag(const char* format, ...) {
  va_list args;
  va_start(args, format);
  vfprintf(stderr, format, args);
  va_end(args);
}
