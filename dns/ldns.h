// The one way to include ldns. <ldns/ldns.h> defines bool, true and false as
// macros unless <stdbool.h> came first, which breaks clang's libstdc++ and
// turns `true` into an int under g++; including <stdbool.h> first makes
// ldns use the language's own. Only code that talks to ldns includes this
// (answer_filter.cc and tests); ldns types never appear in public headers.
#pragma once

// clang-format off
#include <stdbool.h>  // NOLINT(modernize-deprecated-headers): must precede ldns
#include <ldns/ldns.h>
// clang-format on
