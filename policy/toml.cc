// The one unit where toml++'s parser and the rest of its implementation are
// compiled (see policy/toml.h).
#define TOML_IMPLEMENTATION 1
#include "policy/toml.h"
