// `abox image build NAME | ls [--json] | rm NAME...`: the guest images in
// the cache (engine/image/image_store.h).
#pragma once

#include <span>
#include <string_view>

namespace abox::engine {

int run_image_command(std::span<const std::string_view> args);

}  // namespace abox::engine
