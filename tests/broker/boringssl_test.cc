// The broker's TLS code must run on BoringSSL, and OpenSSL must not be in the
// process at all (abox_dns, which the broker uses, no longer links ldns).
#include <gtest/gtest.h>
#include <openssl/base.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>

#include <fstream>
#include <sstream>

#include "broker/tls.h"
#include "dns/answer_filter.h"
#include "policy/policy_file.h"

namespace abox::broker {
namespace {

#if !defined(OPENSSL_IS_BORINGSSL)
#error "broker code must compile against BoringSSL's headers (/usr/include/android)"
#endif

TEST(BoringSsl, TheLibraryCalledAtRunTimeIsBoringSsl) {
  // OpenSSL_version resolves at run time: if OpenSSL's libcrypto had won the
  // symbol lookup, this would say "OpenSSL 3...".
  EXPECT_EQ(tls_library_name(), "BoringSSL");
}

TEST(BoringSsl, BoringSslOnlyCallsWork) {
  // SSL_CTX_set_strict_cipher_list and CRYPTO_BUFFER exist only in BoringSSL.
  SslCtxPtr ctx(SSL_CTX_new(TLS_method()));
  ASSERT_TRUE(ctx);
  EXPECT_EQ(SSL_CTX_set_strict_cipher_list(ctx.get(), "ECDHE-ECDSA-AES128-GCM-SHA256"), 1);
  EXPECT_EQ(SSL_CTX_set_strict_cipher_list(ctx.get(), "NOT-A-CIPHER"), 0);
  take_tls_error();
  static const std::uint8_t kBytes[] = {1, 2, 3};
  CRYPTO_BUFFER* buf = CRYPTO_BUFFER_new(kBytes, sizeof kBytes, nullptr);
  ASSERT_NE(buf, nullptr);
  EXPECT_EQ(CRYPTO_BUFFER_len(buf), 3u);
  CRYPTO_BUFFER_free(buf);
}

TEST(BoringSsl, OnlyBoringSslInTheProcess) {
  // Call into the DNS gate's filter, as the broker's resolver does: it once
  // brought ldns and OpenSSL's libcrypto with it, and BoringSSL had to come
  // first on the link line. Now neither is in the process at all.
  auto policy = policy::parse_policy("[[allow]]\nnames = [\"a.test\"]\nports = [443]\n", "t.toml");
  ASSERT_TRUE(policy.ok());
  static const std::uint8_t kGarbage[] = {0, 1, 2, 3};
  std::uint8_t qname[] = {1, 'a', 4, 't', 'e', 's', 't', 0};
  const policy::HostAddresses host;
  auto r = dns::filter_upstream_answer(kGarbage, dns::AskedQuestion{1, qname, 1, 1}, *policy, host);
  EXPECT_FALSE(r.ok());
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  EXPECT_EQ(text.str().find("libldns"), std::string::npos);
  EXPECT_EQ(text.str().find("libcrypto.so.3"), std::string::npos) << "OpenSSL is loaded beside BoringSSL";
  EXPECT_EQ(text.str().find("libssl.so.3"), std::string::npos);
  EXPECT_NE(text.str().find("android/libssl.so"), std::string::npos);
  EXPECT_EQ(tls_library_name(), "BoringSSL");
  SslCtxPtr ctx(SSL_CTX_new(TLS_method()));
  ASSERT_TRUE(ctx);
  EXPECT_EQ(SSL_CTX_set_strict_cipher_list(ctx.get(), "ECDHE-ECDSA-AES128-GCM-SHA256"), 1);
}

}  // namespace
}  // namespace abox::broker
