// InstanceRuntime: what every broker connection of one instance reads and
// shares. Owned by BrokerService (service.cc); connections hold a reference
// and never outlive it. Private to broker/ (names BoringSSL types).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/event_log.h"
#include "broker/accounting.h"
#include "broker/backoff_table.h"
#include "broker/body_decoder.h"
#include "broker/credentials.h"
#include "broker/event_loop.h"
#include "broker/http_request.h"
#include "broker/injection_gate.h"
#include "broker/leaf_cache.h"
#include "broker/nonce.h"
#include "broker/resolver.h"
#include "broker/tls.h"
#include "broker/upstream_pool.h"
#include "policy/policy.h"

namespace abox::broker {

class Connection;

struct ConnectionLimits {
  std::size_t max_connections = 1024;  // open guest connections
  std::size_t max_handshakes = 64;     // guest TLS handshakes in progress
  std::size_t max_buffered_bytes =
      1 << 20;  // response bytes queued for the guest before upstream reads pause
  // Deadlines: from a fixed point, whatever arrives meanwhile (a peer that
  // trickles a byte at a time still meets them).
  base::Millis handshake_timeout{
      10'000};                         // accept to the end of the guest's TLS handshake (hand-off line too)
  base::Millis head_deadline{10'000};  // a request head's first byte to its empty line (408 past it)
  base::Millis body_deadline{60'000};  // the end of a request head to the end of its body (408 past it)
  // Time-outs: from the last byte either way.
  base::Millis connect_timeout{10'000};  // upstream resolve + connect + TLS
  base::Millis idle_timeout{600'000};    // no byte either way
};

struct InstanceRuntime {
  std::string instance;
  const policy::Policy& policy;
  const Credentials& credentials;
  const NonceTable& nonces;
  InjectionGate& gate;
  LeafCache& leaves;
  SSL_CTX* server_ctx = nullptr;
  SSL_CTX* upstream_ctx = nullptr;
  UpstreamResolver& resolver;
  UpstreamPool& pool;
  Accounting& accounting;
  BackoffTable& backoffs;
  base::EventLog& events;
  BrokerLoop& loop;
  HeadLimits head_limits;
  BodyLimits body_limits;
  ConnectionLimits limits;
  // unix listener: each connection starts with abox-net's hand-off line.
  bool expects_handoff = false;
  // Called once when a connection is finished; the service deletes it after
  // the turn.
  std::function<void(Connection*)> on_closed;
};

}  // namespace abox::broker
