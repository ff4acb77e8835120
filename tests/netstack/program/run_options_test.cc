// `abox-net run` option parsing (parse_run_options, run_command.h), without
// running anything: what each option sets, every usage mistake's message and
// exit status (2 for the appliance alone, 125 when a CMD was given, so the
// CMD's own statuses stay distinguishable), and the bounds of each value.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "netstack/program/run_command.h"

namespace abox::netstack {
namespace {

base::Result<RunInvocation, RunUsageError> parse(std::initializer_list<std::string_view> args) {
  const std::vector<std::string_view> v(args);
  return parse_run_options(v);
}

// The usage error for args (a failure when they parse).
RunUsageError refusal(std::initializer_list<std::string_view> args) {
  auto r = parse(args);
  if (r.ok()) {
    ADD_FAILURE() << "parsed, expected a usage error";
    return {};
  }
  return r.error();
}

TEST(RunOptions, HelpAsksForNothingElse) {
  auto r = parse({"--help"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->help);
  r = parse({"-h", "--no-such-option"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->help);
}

TEST(RunOptions, TheSmallestRunTakesTheDefaults) {
  auto r = parse({"--policy", "p.toml", "--netns", "guest"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ApplianceOptions& o = r->options;
  EXPECT_FALSE(r->help);
  EXPECT_TRUE(r->command.empty());
  EXPECT_EQ(o.policy_path, "p.toml");
  EXPECT_EQ(o.netns, "guest");
  EXPECT_FALSE(o.tap_fd.has_value());
  EXPECT_FALSE(o.stream_path.has_value());
  EXPECT_EQ(o.instance, "guest");
  EXPECT_EQ(o.events_path, "");
  EXPECT_TRUE(o.sandbox);
  EXPECT_TRUE(o.io_on_ring);
  EXPECT_FALSE(o.ipv6_neighbour_discovery);
  EXPECT_FALSE(o.ipv6_flows);
  EXPECT_EQ(o.net.prefix_len, 24u);
  EXPECT_EQ(o.net.ifname, "eth0");
  EXPECT_EQ(o.pcap_max_bytes, 1ull << 30);
}

TEST(RunOptions, EveryOptionLandsWhereItShould) {
  auto r = parse({"--policy=p.toml",
                  "--stream",
                  "/run/vm.sock",
                  "--events",
                  "-",
                  "--instance",
                  "box-1.a_b",
                  "-a",
                  "10.9.0.5/16",
                  "-g",
                  "10.9.0.1",
                  "-m",
                  "1500",
                  "--broker",
                  "/run/broker.sock",
                  "--pcap",
                  "out.pcap",
                  "--pcap-max-bytes",
                  "100M",
                  "--stats-socket",
                  "/run/stats",
                  "--io",
                  "syscalls",
                  "--ipv6",
                  "nd",
                  "--no-sandbox"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ApplianceOptions& o = r->options;
  EXPECT_EQ(o.policy_path, "p.toml");
  EXPECT_EQ(o.stream_path, "/run/vm.sock");
  EXPECT_EQ(o.events_path, "-");
  EXPECT_EQ(o.instance, "box-1.a_b");
  EXPECT_EQ(o.net.guest_address, policy::IpAddress::v4(0x0A09'0005));
  EXPECT_EQ(o.net.prefix_len, 16u);
  EXPECT_EQ(o.net.gateway, policy::IpAddress::v4(0x0A09'0001));
  EXPECT_EQ(o.net.mtu, 1500u);
  EXPECT_EQ(o.broker_path, "/run/broker.sock");
  EXPECT_EQ(o.pcap_path, "out.pcap");
  EXPECT_EQ(o.pcap_max_bytes, 100ull << 20);
  EXPECT_EQ(o.stats_socket, "/run/stats");
  EXPECT_FALSE(o.io_on_ring);
  EXPECT_TRUE(o.ipv6_neighbour_discovery);
  EXPECT_FALSE(o.ipv6_flows);
  EXPECT_FALSE(o.sandbox);
}

TEST(RunOptions, Ipv6OnIsNeighbourDiscoveryAndFlows) {
  auto r = parse({"-p", "p.toml", "--netns", "n", "--ipv6", "on"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->options.ipv6_neighbour_discovery);
  EXPECT_TRUE(r->options.ipv6_flows);
  EXPECT_FALSE(r->options.ipv6_deprecated_tcp);
}

// The mode's old name, kept for one release: the same mode, and a warning.
TEST(RunOptions, Ipv6TcpIsTheDeprecatedNameOfOn) {
  auto r = parse({"-p", "p.toml", "--netns", "n", "--ipv6", "tcp"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->options.ipv6_neighbour_discovery);
  EXPECT_TRUE(r->options.ipv6_flows);
  EXPECT_TRUE(r->options.ipv6_deprecated_tcp);
  EXPECT_FALSE(parse({"-p", "p.toml", "--netns", "n", "--ipv6", "udp"}).ok());
}

TEST(RunOptions, ACommandAfterTheOptionsRunsInANamespaceOfItsOwn) {
  auto r = parse({"--policy", "p.toml", "--ifname", "veth0", "--", "curl", "-v", "https://example.com"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->command, (std::vector<std::string>{"curl", "-v", "https://example.com"}));
  EXPECT_EQ(r->options.net.ifname, "veth0");
}

TEST(RunOptions, ThePolicyIsRequired) {
  const RunUsageError e = refusal({"--netns", "guest"});
  EXPECT_EQ(e.message, "--policy FILE is required");
  EXPECT_EQ(e.exit_code, 2);
}

TEST(RunOptions, ExactlyOneLinkWithoutACommandAndNoneWithOne) {
  const std::string one = "exactly one of --netns, --tap-fd or --stream is required (or a CMD to run)";
  EXPECT_EQ(refusal({"-p", "p.toml"}).message, one);
  EXPECT_EQ(refusal({"-p", "p.toml", "--netns", "n", "--tap-fd", "3"}).message, one);
  EXPECT_EQ(refusal({"-p", "p.toml", "--stream", "s", "--tap-fd", "3"}).message, one);
  const RunUsageError with_cmd = refusal({"-p", "p.toml", "--netns", "n", "--", "true"});
  EXPECT_EQ(with_cmd.message, "CMD runs in a namespace of its own: drop --netns, --tap-fd and --stream");
  EXPECT_EQ(with_cmd.exit_code, 125);
}

TEST(RunOptions, AMistakeWithACommandExitsWith125AndWithoutWith2) {
  EXPECT_EQ(refusal({"--no-such", "-p", "p.toml", "--netns", "n"}).exit_code, 2);
  EXPECT_EQ(refusal({"-p", "p.toml", "--no-such", "--", "true"}).exit_code, 125);
  EXPECT_EQ(refusal({"-p", "p.toml", "--mtu", "1", "--", "true"}).exit_code, 125);
  EXPECT_EQ(refusal({"-p", "p.toml", "--mtu", "1", "--netns", "n"}).exit_code, 2);
  EXPECT_EQ(refusal({"-p"}).exit_code, 2) << "an option without its value";
}

TEST(RunOptions, IfnameOnlyWhereAboxNetNamesTheTap) {
  EXPECT_EQ(refusal({"-p", "p.toml", "--stream", "s", "--ifname", "eth1"}).message,
            "--ifname applies only with --netns or a CMD");
  EXPECT_TRUE(parse({"-p", "p.toml", "--netns", "n", "--ifname", "eth1"}).ok());
  EXPECT_TRUE(parse({"-p", "p.toml", "--netns", "n", "--ifname", "abcdefghijklmno"}).ok());
  EXPECT_EQ(refusal({"-p", "p.toml", "--netns", "n", "--ifname", "abcdefghijklmnop"}).message,
            "--ifname 'abcdefghijklmnop': expected an interface name of 1 to 15 bytes");
  EXPECT_FALSE(parse({"-p", "p.toml", "--netns", "n", "--ifname", ""}).ok());
}

TEST(RunOptions, NumbersAreDecimalAndWithinTheirBounds) {
  auto run = [](std::string_view option, std::string_view value) {
    return parse({"-p", "p.toml", "--netns", "n", option, value});
  };
  EXPECT_FALSE(run("--mtu", "575").ok());
  EXPECT_TRUE(run("--mtu", "576").ok());
  EXPECT_TRUE(run("--mtu", "65520").ok());
  EXPECT_FALSE(run("--mtu", "65521").ok());
  EXPECT_FALSE(run("--mtu", "+1500").ok());
  EXPECT_FALSE(run("--mtu", "0x5dc").ok());
  EXPECT_FALSE(run("--mtu", "").ok());
  EXPECT_FALSE(run("--mtu", "0000000001500").ok()) << "more than 9 digits";
  EXPECT_EQ(refusal({"-p", "p.toml", "--mtu", "big", "--netns", "n"}).message,
            "--mtu 'big': expected a number from 576 to 65520");
  // The tap fd: 0 to 2^20 (and the link is then the fd).
  auto fd = parse({"-p", "p.toml", "--tap-fd", "0"});
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  EXPECT_EQ(fd->options.tap_fd, 0);
  EXPECT_TRUE(parse({"-p", "p.toml", "--tap-fd", "1048576"}).ok());
  EXPECT_EQ(refusal({"-p", "p.toml", "--tap-fd", "1048577"}).message,
            "--tap-fd '1048577': expected a file descriptor number");
  EXPECT_FALSE(parse({"-p", "p.toml", "--tap-fd", "-1"}).ok());
}

TEST(RunOptions, PcapMaxBytesTakesKMGUpTo2To50) {
  auto size = [](std::string_view value) -> std::optional<std::uint64_t> {
    auto r = parse({"-p", "p.toml", "--netns", "n", "--pcap-max-bytes", value});
    if (!r.ok()) return std::nullopt;
    return r->options.pcap_max_bytes;
  };
  EXPECT_EQ(size("1"), 1u);
  EXPECT_EQ(size("4K"), 4096u);
  EXPECT_EQ(size("3M"), 3ull << 20);
  EXPECT_EQ(size("2G"), 2ull << 30);
  EXPECT_EQ(size("1048576G"), 1ull << 50);
  EXPECT_EQ(size("1048577G"), std::nullopt);
  EXPECT_EQ(size("0"), std::nullopt);
  EXPECT_EQ(size("K"), std::nullopt);
  EXPECT_EQ(size("1k"), std::nullopt) << "binary suffixes are upper case";
  EXPECT_EQ(size("1T"), std::nullopt);
  EXPECT_EQ(size("1.5G"), std::nullopt);
}

TEST(RunOptions, AddressesAreIpv4WithAPrefixFrom8To30) {
  auto address = [](std::string_view value) { return parse({"-p", "p.toml", "--netns", "n", "-a", value}); };
  EXPECT_TRUE(address("10.0.2.15").ok());
  EXPECT_TRUE(address("10.0.2.15/8").ok());
  EXPECT_TRUE(address("10.0.2.15/30").ok());
  EXPECT_FALSE(address("10.0.2.15/31").ok());
  EXPECT_FALSE(address("10.0.2.15/7").ok());
  EXPECT_FALSE(address("10.0.2.15/").ok());
  EXPECT_FALSE(address("fd00::2/64").ok());
  EXPECT_FALSE(address("10.0.2").ok());
  EXPECT_EQ(refusal({"-p", "p.toml", "--netns", "n", "-g", "fd00::1"}).message,
            "--gateway 'fd00::1': expected an IPv4 address");
}

TEST(RunOptions, NamesAndPathsAreBounded) {
  EXPECT_EQ(refusal({"-p", "p.toml", "--netns", "n", "--instance", "a b"}).message,
            "--instance 'a b': expected 1 to 64 of A-Z a-z 0-9 . _ -");
  EXPECT_FALSE(parse({"-p", "p.toml", "--netns", "n", "--instance", std::string(65, 'a')}).ok());
  EXPECT_TRUE(parse({"-p", "p.toml", "--netns", "n", "--instance", std::string(64, 'a')}).ok());
  EXPECT_FALSE(parse({"-p", "p.toml", "--netns", "n", "--broker", ""}).ok());
  EXPECT_TRUE(parse({"-p", "p.toml", "--netns", "n", "--broker", "/" + std::string(106, 'b')}).ok());
  EXPECT_FALSE(parse({"-p", "p.toml", "--netns", "n", "--broker", "/" + std::string(107, 'b')}).ok())
      << "a unix socket path holds at most 107 bytes";
  EXPECT_EQ(refusal({"-p", "p.toml", "--stream", ""}).message,
            "--stream '': expected a path for the unix socket");
  EXPECT_EQ(refusal({"-p", "p.toml", "--netns", "n", "--io", "uring"}).message,
            "--io 'uring': expected 'ring' or 'syscalls'");
  EXPECT_EQ(refusal({"-p", "p.toml", "--netns", "n", "--ipv6", "yes"}).message,
            "--ipv6 'yes': expected 'off', 'nd' or 'on'");
}

TEST(RunOptions, PublishedPortsAreParsedAndChecked) {
  auto r = parse({"--policy", "p.toml", "--netns", "g", "--publish", "8080:80", "--publish",
                  "[::1]:5353:53/udp", "--publish-max-connections", "5"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->options.publish.size(), 2u);
  EXPECT_EQ(r->options.publish[0].to_string(), "127.0.0.1:8080:80");
  EXPECT_EQ(r->options.publish[1].to_string(), "[::1]:5353:53/udp");
  EXPECT_EQ(r->options.publish_max_connections, 5u);
  EXPECT_EQ(parse({"--policy", "p.toml", "--netns", "g"})->options.publish_max_connections, 64u);

  RunUsageError e = refusal({"--policy", "p.toml", "--netns", "g", "--publish", "0:80"});
  EXPECT_EQ(e.exit_code, 2);
  EXPECT_EQ(e.message, "--publish '0:80': expected a host port from 1 to 65535");
  e = refusal({"--policy", "p.toml", "--publish", "8080:80", "--publish", "0.0.0.0:8080:81", "--", "sh"});
  EXPECT_EQ(e.exit_code, 125);
  EXPECT_NE(e.message.find("already published"), std::string::npos) << e.message;
  for (auto bad : {"0", "65536", "-1", "x"}) {
    e = refusal({"--policy", "p.toml", "--netns", "g", "--publish-max-connections", bad});
    EXPECT_EQ(e.message,
              "--publish-max-connections '" + std::string(bad) + "': expected a number from 1 to 65535");
  }
}

}  // namespace
}  // namespace abox::netstack
