#include "broker/ca.h"

#include <gtest/gtest.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace abox::broker {
namespace {

constexpr std::int64_t kNow = 1'800'000'000;

class CaTest : public ::testing::Test {
 protected:
  abox::testing::TempDir root_{"abox-ca-test"};
  std::string dir_ = root_.file("state");
};

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

// Verifies `leaf` against `ca` as a TLS client would, for `name` at `when`.
bool verifies(X509* ca, X509* leaf, const std::string& name, std::int64_t when) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
  X509_VERIFY_PARAM_set_time(param, static_cast<time_t>(when));
  X509_VERIFY_PARAM_set1_host(param, name.data(), name.size());
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  bool ok = X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok;
}

TEST_F(CaTest, CreatesFolderKeyAndCertificateWithPrivateModes) {
  auto ca = InstanceCa::load_or_create(dir_, "dev", kNow);
  ASSERT_TRUE(ca.ok()) << ca.error();
  EXPECT_EQ(mode_of(dir_), 0700u);
  EXPECT_EQ(mode_of(dir_ + "/ca.key"), 0600u);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ca.pem"));
  EXPECT_NE((*ca)->certificate_pem().find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_EQ(X509_check_ca((*ca)->certificate()), 1);
  // The CA key is P-256.
  EVP_PKEY* pub = X509_get_pubkey((*ca)->certificate());
  EXPECT_EQ(EVP_PKEY_id(pub), EVP_PKEY_EC);
  EVP_PKEY_free(pub);
}

TEST_F(CaTest, SecondLoadReturnsTheSameCa) {
  auto first = InstanceCa::load_or_create(dir_, "dev", kNow);
  ASSERT_TRUE(first.ok()) << first.error();
  auto second = InstanceCa::load_or_create(dir_, "dev", kNow + 100);
  ASSERT_TRUE(second.ok()) << second.error();
  EXPECT_EQ((*first)->certificate_pem(), (*second)->certificate_pem());
}

// A state folder belongs to the instance that made it: another instance
// is told whose it is, and gets neither its CA nor (through the same
// folder) its nonces.
TEST_F(CaTest, RefusesAFolderMadeForAnotherInstanceAndNamesIt) {
  ASSERT_TRUE(InstanceCa::load_or_create(dir_, "dev", kNow).ok());
  auto other = InstanceCa::load_or_create(dir_, "other", kNow);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error(),
            dir_ +
                " belongs to instance 'dev', not 'other' (its CA names it): use --instance dev, "
                "or another --state folder");
  EXPECT_TRUE(InstanceCa::load_or_create(dir_, "dev", kNow).ok());
}

TEST_F(CaTest, RefusesAFolderOthersCanReach) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0);
  auto ca = InstanceCa::load_or_create(dir_, "dev", kNow);
  ASSERT_FALSE(ca.ok());
  EXPECT_NE(ca.error().find("chmod 700"), std::string::npos) << ca.error();
}

TEST_F(CaTest, RefusesAKeyOthersCanRead) {
  ASSERT_TRUE(InstanceCa::load_or_create(dir_, "dev", kNow).ok());
  ASSERT_EQ(::chmod((dir_ + "/ca.key").c_str(), 0640), 0);
  auto ca = InstanceCa::load_or_create(dir_, "dev", kNow);
  ASSERT_FALSE(ca.ok());
  EXPECT_NE(ca.error().find("ca.key"), std::string::npos) << ca.error();
}

TEST_F(CaTest, RefusesACertificateThatDoesNotMatchTheKey) {
  ASSERT_TRUE(InstanceCa::load_or_create(dir_, "dev", kNow).ok());
  std::string other = root_.file("other");
  ASSERT_TRUE(InstanceCa::load_or_create(other, "dev", kNow).ok());
  std::filesystem::copy_file(other + "/ca.pem", dir_ + "/ca.pem",
                             std::filesystem::copy_options::overwrite_existing);
  auto ca = InstanceCa::load(dir_);
  ASSERT_FALSE(ca.ok());
  EXPECT_NE(ca.error().find("does not match"), std::string::npos) << ca.error();
}

TEST_F(CaTest, RefusesGarbage) {
  ASSERT_TRUE(InstanceCa::load_or_create(dir_, "dev", kNow).ok());
  { std::ofstream(dir_ + "/ca.pem") << "not a certificate"; }
  EXPECT_FALSE(InstanceCa::load(dir_).ok());
}

TEST_F(CaTest, LeafVerifiesForItsNameOnlyAndOnlyWhileValid) {
  auto ca = InstanceCa::load_or_create(dir_, "dev", kNow);
  ASSERT_TRUE(ca.ok());
  auto leaf = (*ca)->mint_leaf("api.example.test", kNow);
  ASSERT_TRUE(leaf);
  X509* cacert = (*ca)->certificate();
  EXPECT_TRUE(verifies(cacert, leaf->certificate.get(), "api.example.test", kNow));
  EXPECT_FALSE(verifies(cacert, leaf->certificate.get(), "other.example.test", kNow));
  EXPECT_FALSE(verifies(cacert, leaf->certificate.get(), "api.example.test", kNow + 25 * 3600));
  EXPECT_FALSE(verifies(cacert, leaf->certificate.get(), "api.example.test", kNow - 3600));
  EXPECT_EQ(leaf->not_after_unix, kNow + InstanceCa::kLeafLifetime.count());
  // Its own key, not the CA's; a leaf cannot sign other certificates.
  EXPECT_EQ(X509_check_private_key(leaf->certificate.get(), leaf->key.get()), 1);
  EXPECT_EQ(X509_check_ca(leaf->certificate.get()), 0);
}

TEST_F(CaTest, EveryLeafHasItsOwnKey) {
  auto ca = InstanceCa::load_or_create(dir_, "dev", kNow);
  ASSERT_TRUE(ca.ok());
  auto a = (*ca)->mint_leaf("a.example.test", kNow);
  auto b = (*ca)->mint_leaf("a.example.test", kNow);
  ASSERT_TRUE(a && b);
  EXPECT_NE(private_key_to_pem(a->key.get()), private_key_to_pem(b->key.get()));
}

}  // namespace
}  // namespace abox::broker
