// BootRandom: the guest's DHCP xids and self-test DNS IDs. They need to be
// unpredictable only to an off-path guesser, not secret, and box-guest runs
// before the guest kernel's random pool is initialised (under TCG, with no
// RDRAND and no virtio-rng, that can take seconds), so it draws with
// GRND_INSECURE, which never blocks. Nothing secret comes from here: the key
// and the nonces come from the host.
#pragma once

#include <cstdint>

#include "base/random.h"

namespace abox::guest {

class BootRandom final : public base::RandomSource {
 public:
  std::uint64_t next_u64() override;

 private:
  std::uint64_t fallback_ = 0;
};

}  // namespace abox::guest
