#include "guest/box_guest/interface_config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"
#include "guest/box_guest/dhcp_packet.h"

namespace abox::guest {
namespace {

std::string failed(std::string_view what, std::string_view ifname) {
  std::string s(what);
  s.append(" ");
  s.append(ifname);
  s.append(": ");
  s.append(std::strerror(errno));
  return s;
}

// An ifreq naming ifname, or false when the name does not fit.
bool name_request(std::string_view ifname, ifreq& req) {
  std::memset(&req, 0, sizeof req);
  if (ifname.empty() || ifname.size() >= sizeof req.ifr_name) return false;
  std::memcpy(req.ifr_name, ifname.data(), ifname.size());
  return true;
}

base::Result<base::UniqueFd, std::string> control_socket() {
  base::UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) return base::Err{std::string("socket(AF_INET): ") + std::strerror(errno)};
  return fd;
}

sockaddr_in ipv4(std::uint32_t address) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(address);
  return sin;
}

// Runs one ioctl on a fresh AF_INET socket.
NetResult request(unsigned long op, ifreq& req, std::string_view what, std::string_view ifname) {
  auto sock = control_socket();
  if (!sock.ok()) return base::Err{sock.error()};
  if (::ioctl(sock->get(), op, &req) != 0) return base::Err{failed(what, ifname)};
  return {};
}

}  // namespace

bool interface_exists(std::string_view ifname) {
  ifreq req;
  if (!name_request(ifname, req)) return false;
  return request(SIOCGIFINDEX, req, "", ifname).ok();
}

NetResult set_link_up(std::string_view ifname) {
  ifreq req;
  if (!name_request(ifname, req)) return base::Err{std::string("bad interface name")};
  if (auto r = request(SIOCGIFFLAGS, req, "SIOCGIFFLAGS", ifname); !r.ok()) return r;
  req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP);
  return request(SIOCSIFFLAGS, req, "SIOCSIFFLAGS", ifname);
}

base::Result<std::array<std::uint8_t, 6>, std::string> hardware_address(std::string_view ifname) {
  ifreq req;
  if (!name_request(ifname, req)) return base::Err{std::string("bad interface name")};
  if (auto r = request(SIOCGIFHWADDR, req, "SIOCGIFHWADDR", ifname); !r.ok()) return base::Err{r.error()};
  std::array<std::uint8_t, 6> mac{};
  std::memcpy(mac.data(), req.ifr_hwaddr.sa_data, mac.size());
  return mac;
}

base::Result<int, std::string> interface_index(std::string_view ifname) {
  ifreq req;
  if (!name_request(ifname, req)) return base::Err{std::string("bad interface name")};
  if (auto r = request(SIOCGIFINDEX, req, "SIOCGIFINDEX", ifname); !r.ok()) return base::Err{r.error()};
  return req.ifr_ifindex;
}

NetResult set_mtu(std::string_view ifname, unsigned mtu) {
  ifreq req;
  if (!name_request(ifname, req)) return base::Err{std::string("bad interface name")};
  req.ifr_mtu = static_cast<int>(mtu);
  return request(SIOCSIFMTU, req, "SIOCSIFMTU", ifname);
}

NetResult set_ipv4_address(std::string_view ifname, std::uint32_t address, unsigned prefix) {
  if (prefix < 1 || prefix > 32) return base::Err{std::string("prefix length out of range")};
  ifreq req;
  if (!name_request(ifname, req)) return base::Err{std::string("bad interface name")};
  auto sin = ipv4(address);
  std::memcpy(&req.ifr_addr, &sin, sizeof sin);
  if (auto r = request(SIOCSIFADDR, req, "SIOCSIFADDR", ifname); !r.ok()) return r;
  const std::uint32_t mask = prefix == 32 ? 0xFFFF'FFFFu : ~(0xFFFF'FFFFu >> prefix);
  auto mask_sin = ipv4(mask);
  std::memcpy(&req.ifr_netmask, &mask_sin, sizeof mask_sin);
  return request(SIOCSIFNETMASK, req, "SIOCSIFNETMASK", ifname);
}

NetResult add_default_route(std::string_view ifname, std::uint32_t gateway) {
  char dev[IFNAMSIZ] = {};
  if (ifname.empty() || ifname.size() >= sizeof dev) return base::Err{std::string("bad interface name")};
  std::memcpy(dev, ifname.data(), ifname.size());
  rtentry route{};
  auto any = ipv4(0);
  auto gw = ipv4(gateway);
  std::memcpy(&route.rt_dst, &any, sizeof any);
  std::memcpy(&route.rt_genmask, &any, sizeof any);
  std::memcpy(&route.rt_gateway, &gw, sizeof gw);
  route.rt_flags = RTF_UP | RTF_GATEWAY;
  route.rt_dev = dev;
  auto sock = control_socket();
  if (!sock.ok()) return base::Err{sock.error()};
  if (::ioctl(sock->get(), SIOCADDRT, &route) != 0 && errno != EEXIST)
    return base::Err{failed("SIOCADDRT default via " + ipv4_text(gateway) + " dev", ifname)};
  return {};
}

std::string resolv_conf_text(std::span<const std::uint32_t> servers) {
  std::string text = "# written by box-guest from the DHCP lease\n";
  for (auto s : servers) {
    text.append("nameserver ");
    text.append(ipv4_text(s));
    text.push_back('\n');
  }
  return text;
}

NetResult write_file_atomically(const std::string& path, std::string_view text, unsigned mode) {
  std::string temp = path + ".box-guest.tmp";
  base::UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) return base::Err{"open " + temp + ": " + std::strerror(errno)};
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string why = "write " + temp + ": " + std::strerror(errno);
      ::unlink(temp.c_str());
      return base::Err{why};
    }
    done += static_cast<std::size_t>(n);
  }
  // The mode given, whatever the umask.
  if (::fchmod(fd.get(), mode) != 0 || ::rename(temp.c_str(), path.c_str()) != 0) {
    std::string why = "rename to " + path + ": " + std::strerror(errno);
    ::unlink(temp.c_str());
    return base::Err{why};
  }
  return {};
}

}  // namespace abox::guest
