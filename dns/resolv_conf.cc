#include "dns/resolv_conf.h"

#include <fstream>
#include <sstream>

namespace abox::dns {

std::vector<policy::Endpoint> parse_resolv_conf(std::string_view text) {
  std::vector<policy::Endpoint> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (auto hash = line.find_first_of("#;"); hash != std::string_view::npos) line = line.substr(0, hash);
    auto skip_blank = [&line] {
      while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    };
    skip_blank();
    constexpr std::string_view kKey = "nameserver";
    if (!line.starts_with(kKey)) continue;
    line.remove_prefix(kKey.size());
    if (line.empty() || (line.front() != ' ' && line.front() != '\t')) continue;
    skip_blank();
    std::size_t stop = line.find_first_of(" \t\r");
    std::string_view addr = line.substr(0, stop);
    if (auto a = policy::IpAddress::parse(addr)) {
      policy::Endpoint ep{*a, 53};
      bool dup = false;
      for (const auto& e : out) dup = dup || e == ep;
      if (!dup) out.push_back(ep);
    }
  }
  return out;
}

std::vector<policy::Endpoint> read_resolv_conf(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_resolv_conf(ss.str());
}

}  // namespace abox::dns
