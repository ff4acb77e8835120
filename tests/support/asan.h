// ABOX_TEST_ASAN: defined when the test is built with AddressSanitizer (GCC
// says so with __SANITIZE_ADDRESS__, clang with __has_feature), for the few
// tests whose expectations differ under it (the sanitizer's runtime
// allocates on its own and needs syscalls the sandbox otherwise kills).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define ABOX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ABOX_TEST_ASAN 1
#endif
#endif
