#include "broker/tls.h"

#include <openssl/crypto.h>
#include <openssl/ec_key.h>
#include <openssl/err.h>
#include <openssl/nid.h>
#include <openssl/pem.h>

#include <climits>

namespace abox::broker {

EvpPkeyPtr generate_p256_key() {
  EvpPkeyPtr pkey(EVP_PKEY_new());
  if (!pkey) return nullptr;
  EC_KEY* ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
  if (ec == nullptr || EC_KEY_generate_key(ec) != 1 || EVP_PKEY_assign_EC_KEY(pkey.get(), ec) != 1) {
    EC_KEY_free(ec);
    return nullptr;
  }
  return pkey;
}

namespace {

std::string drain_mem_bio(BIO* bio) {
  const std::uint8_t* data = nullptr;
  std::size_t len = 0;
  if (BIO_mem_contents(bio, &data, &len) != 1) return {};
  return std::string(reinterpret_cast<const char*>(data), len);
}

BioPtr read_bio(std::string_view text) {
  if (text.size() > INT_MAX) return nullptr;
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

}  // namespace

std::string to_pem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return {};
  return drain_mem_bio(bio.get());
}

std::string private_key_to_pem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) return {};
  return drain_mem_bio(bio.get());
}

X509Ptr certificate_from_pem(std::string_view pem) {
  BioPtr bio = read_bio(pem);
  if (!bio) return nullptr;
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

EvpPkeyPtr private_key_from_pem(std::string_view pem) {
  BioPtr bio = read_bio(pem);
  if (!bio) return nullptr;
  return EvpPkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

std::string take_tls_error() {
  std::uint32_t code = ERR_get_error();
  if (code == 0) return {};
  char buf[256];
  ERR_error_string_n(code, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

std::string tls_library_name() {
  return OpenSSL_version(OPENSSL_VERSION);
}

}  // namespace abox::broker
