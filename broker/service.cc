// BrokerService: startup (validate and build everything the connections
// share) and the accept loop. See service.h.
#include "broker/service.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <unordered_map>

#include "broker/accounting.h"
#include "broker/backoff_table.h"
#include "broker/binding_reload.h"
#include "broker/ca.h"
#include "broker/connection.h"
#include "broker/control_socket.h"
#include "broker/credentials.h"
#include "broker/event_loop.h"
#include "broker/injection_gate.h"
#include "broker/instance_secret.h"
#include "broker/leaf_cache.h"
#include "broker/nonce.h"
#include "broker/resolver.h"
#include "broker/runtime.h"
#include "broker/sandbox.h"
#include "broker/tls.h"
#include "broker/upstream.h"
#include "broker/upstream_pool.h"
#include "dns/resolv_conf.h"
#include "policy/policy_file.h"

namespace abox::broker {

namespace {

constexpr std::uint8_t kAlpnHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

int servername_callback(SSL* ssl, int* alert, void* /*arg*/) {
  auto* conn = static_cast<Connection*>(SSL_get_app_data(ssl));
  if (conn == nullptr) return SSL_TLSEXT_ERR_ALERT_FATAL;
  return conn->on_servername(ssl, alert);
}

// ALPN: http/1.1 only. A client that offers ALPN without it is refused; one
// that offers no ALPN speaks HTTP/1.1 anyway.
int alpn_callback(SSL* /*ssl*/, const std::uint8_t** out, std::uint8_t* out_len, const std::uint8_t* in,
                  unsigned in_len, void* /*arg*/) {
  std::uint8_t* selected = nullptr;
  std::uint8_t selected_len = 0;
  if (SSL_select_next_proto(&selected, &selected_len, kAlpnHttp11, sizeof kAlpnHttp11, in, in_len) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = selected;
  *out_len = selected_len;
  return SSL_TLSEXT_ERR_OK;
}

base::Result<SslCtxPtr, std::string> make_server_context() {
  SslCtxPtr ctx(SSL_CTX_new(TLS_method()));
  if (!ctx) return base::Err{std::string("cannot make the server TLS context: ") + take_tls_error()};
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_tlsext_servername_callback(ctx.get(), servername_callback);
  SSL_CTX_set_alpn_select_cb(ctx.get(), alpn_callback, nullptr);
  return ctx;
}

std::string errno_text() {
  return std::strerror(errno);
}

struct Listener {
  base::UniqueFd fd;
  std::string where;
};

base::Result<Listener, std::string> open_listener(const std::string& listen) {
  Listener l;
  if (listen.starts_with("unix:")) {
    std::string path = listen.substr(5);
    sockaddr_un sun{};
    if (path.empty() || path.size() >= sizeof sun.sun_path) return base::Err{listen + ": bad socket path"};
    sun.sun_family = AF_UNIX;
    std::memcpy(sun.sun_path, path.data(), path.size());
    l.fd.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!l.fd) return base::Err{listen + ": " + errno_text()};
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) return base::Err{path + ": exists and is not a socket"};
      // A socket someone still accepts on is in use; only a stale one (of an
      // earlier run) is replaced.
      base::UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (probe && ::connect(probe.get(), reinterpret_cast<sockaddr*>(&sun), sizeof sun) == 0) {
        return base::Err{path + ": in use by another process"};
      }
      ::unlink(path.c_str());
    }
    mode_t old = ::umask(0177);
    int rc = ::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&sun), sizeof sun);
    ::umask(old);
    if (rc != 0) return base::Err{path + ": cannot bind: " + errno_text()};
    l.where = listen;
  } else {
    auto ep = policy::Endpoint::parse_listen(listen);
    if (!ep) return base::Err{listen + ": not unix:PATH or ADDR:PORT (port 0 picks one)"};
    sockaddr_storage ss{};
    socklen_t len = fill_sockaddr(ep->address, ep->port, ss);
    l.fd.reset(::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!l.fd) return base::Err{listen + ": " + errno_text()};
    int one = 1;
    ::setsockopt(l.fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      return base::Err{listen + ": cannot bind: " + errno_text()};
    }
    socklen_t got = sizeof ss;
    ::getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&ss), &got);
    std::uint16_t port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                        : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    // Appended piece by piece: "[" + text (operator+ on a literal) made GCC
    // 12 at -O3 report a false -Wrestrict overlap (GCC bug 105329).
    l.where.clear();
    if (ep->address.is_v6()) l.where.push_back('[');
    l.where.append(ep->address.to_string());
    l.where.append(ep->address.is_v6() ? "]:" : ":");
    l.where.append(std::to_string(port));
  }
  if (::listen(l.fd.get(), 1024) != 0) return base::Err{listen + ": cannot listen: " + errno_text()};
  return l;
}

}  // namespace

struct BrokerService::Impl {
  BrokerOptions options;
  base::EventLog& events;
  std::unique_ptr<policy::Policy> policy;
  std::optional<Credentials> credentials;
  std::unique_ptr<InstanceCa> ca;
  std::optional<InstanceSecret> secret;
  std::unique_ptr<NonceTable> nonces;
  std::unique_ptr<InjectionGate> gate;
  std::unique_ptr<LeafCache> leaves;
  SslCtxPtr server_ctx;
  SslCtxPtr upstream_ctx;
  BrokerLoop loop;
  std::unique_ptr<UpstreamResolver> resolver;
  std::unique_ptr<UpstreamPool> pool;
  std::unique_ptr<Accounting> accounting;
  std::unique_ptr<BackoffTable> backoffs;
  std::unique_ptr<InstanceRuntime> runtime;
  std::unique_ptr<BrokerControlSocket> control;
  Listener listener;
  base::UniqueFd signals;
  base::UniqueFd stats_fd;  // --stats-file, opened at startup (append)
  bool confined = false;    // enter_sandbox() ran: no unlink at exit
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections;
  std::uint64_t next_id = 1;
  std::string unix_path;

  Impl(const BrokerOptions& o, base::EventLog& e) : options(o), events(e) {}

  void on_accept();
  void on_signal();
  std::string answer_control(std::string_view line, std::string_view body);
  std::string reload(std::string_view source, std::string_view text);
  void dump_stats();
  void emit_stats_events();
  void schedule_stats_events();
  std::string stats() const { return accounting->to_json(options.instance, leaves->size(), leaves->mints()); }
};

base::Result<std::unique_ptr<BrokerService>, std::string> BrokerService::create(const BrokerOptions& options,
                                                                                base::EventLog& events) {
  auto impl = std::make_unique<Impl>(options, events);
  auto loaded = policy::load_policy(options.policy_file);
  if (!loaded.ok()) {
    return base::Err{loaded.error().to_string() +
                     (loaded.error().unreadable ? "the policy cannot be read" : "the policy is invalid")};
  }
  impl->policy = std::make_unique<policy::Policy>(std::move(loaded).value());
  const policy::Policy& pol = *impl->policy;
  if (pol.brokers().empty()) return base::Err{options.policy_file + ": the policy has no [[broker]] binding"};

  // The keys: over the fd the engine passed (read once, then closed: the
  // broker holds no way back to them), or from an operator's file.
  auto creds = options.credentials_fd >= 0 ? Credentials::read_fd(options.credentials_fd, pol)
                                           : Credentials::load(options.credentials_file, pol);
  if (options.credentials_fd >= 0) ::close(options.credentials_fd);
  if (!creds.ok()) return base::Err{creds.error()};
  impl->credentials.emplace(std::move(creds).value());

  auto ca = InstanceCa::load_or_create(options.state_dir, options.instance, std::time(nullptr));
  if (!ca.ok()) return base::Err{ca.error()};
  impl->ca = std::move(ca).value();
  auto secret = InstanceSecret::load_or_create(options.state_dir);
  if (!secret.ok()) return base::Err{secret.error()};
  impl->secret.emplace(std::move(secret).value());
  impl->nonces = std::make_unique<NonceTable>(impl->secret->bytes(), pol.brokers());
  impl->gate = std::make_unique<InjectionGate>(pol, *impl->nonces);
  impl->leaves = std::make_unique<LeafCache>(*impl->ca, options.max_leaves);

  auto server_ctx = make_server_context();
  if (!server_ctx.ok()) return base::Err{server_ctx.error()};
  impl->server_ctx = std::move(server_ctx).value();
  auto upstream_ctx = make_upstream_context(options.upstream_ca);
  if (!upstream_ctx.ok()) return base::Err{upstream_ctx.error()};
  impl->upstream_ctx = std::move(upstream_ctx).value();

  auto upstreams = pol.dns().use_system ? dns::read_resolv_conf() : pol.dns().upstreams;
  if (upstreams.empty()) {
    return base::Err{
        std::string("no upstream resolver: /etc/resolv.conf has no usable nameserver; set [dns] "
                    "upstreams in the policy")};
  }
  impl->resolver = std::make_unique<UpstreamResolver>(impl->loop, pol, std::move(upstreams), events);
  impl->accounting = std::make_unique<Accounting>(pol);
  Impl* raw = impl.get();
  impl->backoffs = std::make_unique<BackoffTable>(pol, *impl->accounting, events, [raw](base::MonoTime at) {
    raw->loop.schedule(at, [raw] { raw->backoffs->expire(raw->loop.now()); });
  });
  impl->pool = std::make_unique<UpstreamPool>(impl->loop, pol.brokers().size());

  if (!options.stats_file.empty()) {
    impl->stats_fd.reset(
        ::open(options.stats_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!impl->stats_fd) return base::Err{options.stats_file + ": " + errno_text()};
  }
  if (!options.control_socket.empty()) {
    auto control = BrokerControlSocket::create(
        impl->loop, options.control_socket,
        [raw](std::string_view line, std::string_view body) { return raw->answer_control(line, body); });
    if (!control.ok()) return base::Err{control.error()};
    impl->control = std::move(control).value();
  }
  auto listener = open_listener(options.listen);
  if (!listener.ok()) return base::Err{listener.error()};
  impl->listener = std::move(listener).value();
  if (options.listen.starts_with("unix:")) impl->unix_path = options.listen.substr(5);

  ConnectionLimits limits;
  limits.max_connections = options.max_connections;
  limits.max_handshakes = options.max_handshakes;
  limits.max_buffered_bytes = pol.limits().flow_buffer_bytes;
  limits.handshake_timeout = base::Millis(pol.timeouts().tls_handshake_ms);
  limits.head_deadline = base::Millis(pol.timeouts().http_head_ms);
  limits.body_deadline = base::Millis(pol.timeouts().http_body_ms);
  limits.connect_timeout = base::Millis(pol.timeouts().connect_ms);
  limits.idle_timeout = base::Seconds(pol.timeouts().tcp_idle_s);
  impl->runtime.reset(new InstanceRuntime{
      options.instance, pol, *impl->credentials, *impl->nonces, *impl->gate, *impl->leaves,
      impl->server_ctx.get(), impl->upstream_ctx.get(), *impl->resolver, *impl->pool, *impl->accounting,
      *impl->backoffs, events, impl->loop, HeadLimits::from(pol.limits()), body_limits(pol.limits()), limits,
      options.listen.starts_with("unix:"), [raw](Connection* c) {
        --raw->accounting->service().connections_open;
        // Destroyed at the end of the turn: c is inside one of its own callbacks.
        auto it = raw->connections.find(c->id());
        if (it == raw->connections.end()) return;
        raw->loop.delete_later(std::move(it->second));
        raw->connections.erase(it);
      }});

  if (!impl->loop.watch(impl->listener.fd.get(), POLLIN, [raw](std::uint32_t) { raw->on_accept(); })) {
    return base::Err{std::string("cannot watch the listening socket")};
  }
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGUSR1);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  impl->signals.reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!impl->signals ||
      !impl->loop.watch(impl->signals.get(), POLLIN, [raw](std::uint32_t) { raw->on_signal(); })) {
    return base::Err{std::string("cannot watch signals: ") + errno_text()};
  }
  return std::unique_ptr<BrokerService>(new BrokerService(std::move(impl)));
}

BrokerService::BrokerService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

BrokerService::~BrokerService() {
  impl_->connections.clear();
  // Connections closed in the last turn refer to the runtime, which goes
  // before the loop.
  impl_->loop.io().delete_retired_now();
  // A confined broker may not unlink: its socket file stays, and the next
  // broker on that path replaces it (nobody accepts on it any more).
  if (!impl_->unix_path.empty() && !impl_->confined) ::unlink(impl_->unix_path.c_str());
}

base::Result<void, std::string> BrokerService::enter_sandbox() {
  auto r = enter_broker_sandbox(impl_->loop.io());
  if (r.ok()) impl_->confined = true;
  return r;
}

void BrokerService::run() {
  impl_->events.emit("broker_started",
                     {{"listen", impl_->listener.where},
                      {"bindings", static_cast<std::uint64_t>(impl_->policy->brokers().size())}});
  impl_->schedule_stats_events();
  impl_->loop.run();
  impl_->dump_stats();
}

void BrokerService::Impl::schedule_stats_events() {
  loop.schedule(loop.now() + base::Seconds(kStatsIntervalSeconds), [this] {
    emit_stats_events();
    schedule_stats_events();
  });
}

void BrokerService::Impl::emit_stats_events() {
  for (std::size_t i = 0; i < policy->brokers().size(); ++i) {
    const auto& b = policy->brokers()[i];
    const auto& a = accounting->binding(i);
    events.emit("broker_stats", {{"binding", b.name},
                                 {"port", static_cast<std::uint64_t>(b.port)},
                                 {"requests", a.requests},
                                 {"refused", a.refused},
                                 {"bytes_up", a.bytes_up},
                                 {"bytes_down", a.bytes_down},
                                 {"rate_limited", a.rate_limited},
                                 {"server_errors", a.server_errors},
                                 {"keys_scrubbed", a.keys_scrubbed},
                                 {"last_retry_after", a.last_retry_after},
                                 {"backoffs", a.backoffs},
                                 {"backoff_answered", a.backoff_answered},
                                 {"backoff_active", a.backoff_active}});
  }
}

std::string BrokerService::stats_json() const {
  return impl_->stats();
}
std::string BrokerService::reload_policy(std::string_view source, std::string_view text) {
  return impl_->reload(source, text);
}

std::string BrokerService::Impl::answer_control(std::string_view line, std::string_view body) {
  if (line == "stats") return stats();
  if (line == "reload" || line.starts_with("reload ")) {
    std::string_view source = line.substr(std::min<std::size_t>(line.size(), 7));
    return reload(source.empty() ? std::string_view("<reload>") : source, body);
  }
  return "3\nunknown request (expected 'stats' or 'reload SOURCE')";
}

std::string BrokerService::Impl::reload(std::string_view source, std::string_view text) {
  auto parsed = policy::parse_policy(text, source);
  if (!parsed.ok()) {
    const policy::PolicyError& e = parsed.error();
    events.emit("broker_policy", {{"reason", "reload refused: the policy is invalid"},
                                  {"policy", source},
                                  {"error", e.diagnostics.front().to_string()},
                                  {"problems", static_cast<std::uint64_t>(e.total)}});
    return "1\n" + e.to_string() + "the policy is invalid: nothing changed";
  }
  const std::size_t count = policy->brokers().size();
  std::vector<bool> active_now(count);
  for (std::size_t i = 0; i < count; ++i) active_now[i] = !gate->removed(i);
  auto plan = plan_binding_reload(*policy, active_now, *parsed);
  if (!plan.ok()) {
    events.emit("broker_policy", {{"reason", "reload refused: a binding needs a restart"},
                                  {"policy", source},
                                  {"error", plan.error().substr(0, plan.error().find('\n'))}});
    return "1\n" + plan.error() + "\nnothing changed";
  }
  std::size_t in_force = 0;
  for (std::size_t i = 0; i < count; ++i) {
    gate->set_removed(i, !plan->active[i]);
    in_force += plan->active[i] ? 1 : 0;
  }
  auto joined = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
    return s;
  };
  events.emit("broker_policy", {{"reason", "reloaded"},
                                {"policy", source},
                                {"bindings", static_cast<std::uint64_t>(in_force)},
                                {"removed", joined(plan->removed)},
                                {"restored", joined(plan->restored)}});
  std::string reply = "0\napplied " + std::string(source) + ": " + std::to_string(in_force) + " of " +
                      std::to_string(count) + " bindings in force";
  for (const auto& r : plan->removed) reply += "\nremoved " + r;
  for (const auto& r : plan->restored) reply += "\nrestored " + r;
  reply +=
      "\nnote: the broker keeps its [limits], [timeouts] and [dns] from the start until the instance "
      "restarts";
  return reply;
}
const std::string& BrokerService::listening_on() const {
  return impl_->listener.where;
}

void BrokerService::Impl::on_accept() {
  // Bounded per turn, so a connect flood cannot starve the connections.
  for (int i = 0; i < 64; ++i) {
    base::UniqueFd fd(::accept4(listener.fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) return;
    auto& s = accounting->service();
    if (s.connections_open >= runtime->limits.max_connections) {
      ++s.connections_refused_limit;
      events.emit("broker_limit", {{"what", "connections"},
                                   {"limit", static_cast<std::uint64_t>(runtime->limits.max_connections)}});
      continue;  // closed by fd's destructor
    }
    if (s.handshakes_in_progress >= runtime->limits.max_handshakes) {
      ++s.handshakes_refused_limit;
      events.emit("broker_limit", {{"what", "handshakes"},
                                   {"limit", static_cast<std::uint64_t>(runtime->limits.max_handshakes)}});
      continue;
    }
    if (!runtime->expects_handoff) {
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    ++s.connections_accepted;
    ++s.connections_open;
    std::uint64_t id = next_id++;
    auto conn = std::make_unique<Connection>(*runtime, std::move(fd), id);
    Connection* c = conn.get();
    connections.emplace(id, std::move(conn));
    if (!c->start()) {
      --s.connections_open;
      connections.erase(id);
    }
  }
}

void BrokerService::Impl::on_signal() {
  signalfd_siginfo si{};
  while (::read(signals.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    if (si.ssi_signo == SIGUSR1) {
      dump_stats();
    } else {
      loop.stop();
    }
  }
}

void BrokerService::Impl::dump_stats() {
  emit_stats_events();
  std::string line = stats() + "\n";
  // One write of the whole line, appended: the last line that ends in a
  // newline is the latest table (a reader never mistakes half of one).
  (void)!::write(stats_fd ? stats_fd.get() : STDERR_FILENO, line.data(), line.size());
}

base::Result<std::string, std::string> instance_ca_pem(const std::string& state_dir,
                                                       std::string_view instance) {
  auto ca = InstanceCa::load_or_create(state_dir, instance, std::time(nullptr));
  if (!ca.ok()) return base::Err{ca.error()};
  return (*ca)->certificate_pem();
}

base::Result<std::vector<BindingNonce>, std::string> binding_nonces(const policy::Policy& policy,
                                                                    const std::string& state_dir) {
  if (auto d = ensure_private_dir(state_dir); !d.ok()) return base::Err{d.error()};
  auto secret = InstanceSecret::load_or_create(state_dir);
  if (!secret.ok()) return base::Err{secret.error()};
  NonceTable table(secret->bytes(), policy.brokers());
  std::vector<BindingNonce> out;
  for (std::size_t i = 0; i < policy.brokers().size(); ++i) {
    const auto& b = policy.brokers()[i];
    out.push_back(BindingNonce{b.name, b.port, b.credential, b.nonce_env, std::string(table.nonce_for(i))});
  }
  return out;
}

}  // namespace abox::broker
