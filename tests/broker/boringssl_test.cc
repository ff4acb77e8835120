// The broker's TLS code must run on BoringSSL, even though ldns (linked into
// the same programs through abox_dns) pulls OpenSSL into the process.
#include <gtest/gtest.h>
#include <openssl/base.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>

#include "broker/tls.h"

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

}  // namespace
}  // namespace abox::broker
