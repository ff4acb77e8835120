// The one way to include ldns, which only the tests and the dns_answer fuzz
// target use: an encoder and decoder independent of ours (dns/name.h,
// dns/rdata.h) that builds upstream answers and reads back what the guest
// sees. abox-net and the broker do not link it.
//
// <ldns/ldns.h> defines bool, true and false as macros unless <stdbool.h>
// came first, which breaks clang's libstdc++ and turns `true` into an int
// under g++; including <stdbool.h> first makes ldns use the language's own.
#pragma once

// clang-format off
#include <stdbool.h>  // NOLINT(modernize-deprecated-headers): must precede ldns
#include <ldns/ldns.h>
// clang-format on
