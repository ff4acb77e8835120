#include "engine/cli/doctor_command.h"

#include <unistd.h>

#include <ostream>
#include <string>

#include "base/json.h"
#include "engine/cli/exit_codes.h"
#include "engine/daemon/daemon_paths.h"
#include "engine/doctor/host_checks.h"
#include "engine/image/image_store.h"
#include "engine/version.h"
#include "helper/client.h"

namespace abox::engine {

namespace {

constexpr std::string_view kUsage =
    "usage: abox doctor [--json]\n"
    "\n"
    "Checks what abox needs from this host, trying each thing for real: KVM (boots\n"
    "the guest kernel), TUN, io_uring and its restrictions, seccomp, user\n"
    "namespaces, cgroup v2 and its delegation, QEMU with microvm, the guest kernel\n"
    "and images, abox-helper, the daemon. Each item is OK, DEGRADED (abox works;\n"
    "what it costs) or MISSING (abox cannot run an instance; the fix).\n"
    "\n"
    "Options:\n"
    "  --json   {\"items\":[{\"id\",\"title\",\"status\",\"detail\",\"cost\",\"fix\"}],\n"
    "           \"missing\":N,\"degraded\":N}\n"
    "\n"
    "Exit status: 0 nothing is MISSING, 1 something is, 2 usage error.\n";

}  // namespace

int run_doctor_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  bool json = false;
  for (auto a : args) {
    if (is_help_flag(a)) {
      out << kUsage;
      return kExitOk;
    }
    if (a == "--json") {
      json = true;
      continue;
    }
    err << "abox doctor: unknown argument '" << a << "' (see 'abox doctor --help')\n";
    return kExitUsage;
  }
  HostCheckInputs in;
  in.layout = Layout::discover();
  in.cache_dir = default_cache_dir();
  in.images_root = ImageStore::default_root();
  in.helper_socket = helper::helper_socket_path(::getuid());
  in.daemon_dir = daemon_runtime_dir();
  in.abox_version = abox_version();
  const auto items = run_host_checks(in);

  std::size_t missing = 0, degraded = 0;
  for (const auto& i : items) {
    missing += i.status == CheckStatus::kMissing;
    degraded += i.status == CheckStatus::kDegraded;
  }
  if (json) {
    std::string text;
    base::JsonWriter w(text);
    w.begin_object().key("items").begin_array();
    for (const auto& i : items) {
      w.begin_object()
          .field("id", i.id)
          .field("title", i.title)
          .field("status", status_name(i.status))
          .field("detail", i.detail)
          .field("cost", i.cost)
          .field("fix", i.fix)
          .end_object();
    }
    w.end_array().field("missing", static_cast<std::uint64_t>(missing));
    w.field("degraded", static_cast<std::uint64_t>(degraded)).end_object();
    out << text << '\n';
  } else {
    for (const auto& i : items) {
      std::string status(status_name(i.status));
      out << status << std::string(10 - status.size(), ' ') << i.title << ": " << i.detail << '\n';
      if (!i.cost.empty()) out << "          costs: " << i.cost << '\n';
      if (!i.fix.empty()) out << "          fix: " << i.fix << '\n';
    }
    out << (missing == 0 ? "abox can run here"
                         : "abox cannot run an instance here until the MISSING items are fixed")
        << " (" << missing << " missing, " << degraded << " degraded)\n";
  }
  return missing == 0 ? kExitOk : kExitNo;
}

}  // namespace abox::engine
