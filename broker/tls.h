// RAII for BoringSSL objects, and the few TLS helpers the broker shares.
//
// Private to broker/: these headers name BoringSSL types, so only broker/
// sources (and its unit tests) include them; nothing outside broker/ sees an
// SSL type (STYLE.md: a third-party library stays inside its one target).
//
// Every owner is a std::unique_ptr with the library's free function as its
// deleter, so an SSL, SSL_CTX, EVP_PKEY, X509 or BIO is freed exactly once on
// every path. BoringSSL's own bssl::UniquePtr does the same; these names keep
// our code independent of which headers declare it.
#pragma once

#include <openssl/base.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <string_view>

namespace abox::broker {

template <class T, void (*Free)(T*)>
struct TlsDeleter {
  void operator()(T* p) const { Free(p); }
};

using SslPtr = std::unique_ptr<SSL, TlsDeleter<SSL, SSL_free>>;
using SslCtxPtr = std::unique_ptr<SSL_CTX, TlsDeleter<SSL_CTX, SSL_CTX_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, TlsDeleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, TlsDeleter<X509, X509_free>>;
using BioPtr = std::unique_ptr<BIO, TlsDeleter<BIO, BIO_free_all>>;

// A fresh ECDSA P-256 key; null only when the library is out of memory.
EvpPkeyPtr generate_p256_key();

// PEM text of a certificate or a private key (PKCS#8).
std::string to_pem(X509* cert);
std::string private_key_to_pem(EVP_PKEY* key);
// Parses PEM text; null when it is not one certificate / one key.
X509Ptr certificate_from_pem(std::string_view pem);
EvpPkeyPtr private_key_from_pem(std::string_view pem);

// The most recent library error as text ("" when none), and clears the queue.
std::string take_tls_error();

// The name of the TLS library this process actually calls (OpenSSL_version),
// e.g. "BoringSSL": what the boringssl test checks.
std::string tls_library_name();

}  // namespace abox::broker
