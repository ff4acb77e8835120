// The instance CA, where the guest's TLS clients look for it
// (docs/control-protocol.md, "The command"): `dir`/ca.pem holds setup's
// ca_pem alone (for NODE_EXTRA_CA_CERTS), `dir`/ca-bundle.pem the image's
// system bundle (when it has one; at most 4 MiB of it is read) followed by
// the CA (for SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE). /run is a
// tmpfs, so nothing is written to the image. Files are 0644, the folder
// 0755: the agent reads them.
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace abox::guest {

struct CaPaths {
  std::string dir = "/run/abox";
  std::string system_bundle = "/etc/ssl/certs/ca-certificates.crt";
};

base::Result<void, std::string> install_ca(std::string_view pem, const CaPaths& paths = {});

}  // namespace abox::guest
