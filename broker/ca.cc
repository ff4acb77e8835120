#include "broker/ca.h"

#include <fcntl.h>
#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/digest.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/private_file.h"
#include "base/unique_fd.h"

namespace abox::broker {

namespace {

constexpr std::int64_t kCaLifetimeSeconds = 10LL * 365 * 24 * 3600;

std::string errno_text() {
  return std::strerror(errno);
}

// Writes `text` to `path` with `mode`, atomically: a temporary file created
// exclusively, fsync'd, then renamed over the target.
base::Result<void, std::string> write_file_atomic(const std::string& path, std::string_view text,
                                                  mode_t mode) {
  std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  base::UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) return base::Err{tmp + ": cannot create: " + errno_text()};
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return base::Err{tmp + ": cannot write: " + errno_text()};
    done += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd.get(), mode) != 0 || ::fsync(fd.get()) != 0) return base::Err{tmp + ": " + errno_text()};
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return base::Err{path + ": cannot rename into place: " + errno_text()};
  return {};
}

// The CA's files: at most 1 MiB, no symlink; the key only its owner's.
base::Result<std::string, std::string> read_small_file(const std::string& path, bool must_be_private) {
  auto read = base::read_private_file(path, 1 << 20,
                                      must_be_private ? base::Readers::owner_only : base::Readers::anyone);
  if (!read.ok()) return base::Err{std::move(read.error().message)};
  return std::move(*read);
}

bool add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

bool set_random_serial(X509* cert) {
  BIGNUM* bn = BN_new();
  if (bn == nullptr) return false;
  // 127 random bits: positive, unique enough, within RFC 5280's 20 bytes.
  bool ok = BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1 &&
            BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != nullptr;
  BN_free(bn);
  return ok;
}

bool set_name(X509_NAME* name, std::string_view cn) {
  return X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, reinterpret_cast<const std::uint8_t*>("abox"),
                                    -1, -1, 0) == 1 &&
         X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                    reinterpret_cast<const std::uint8_t*>(cn.data()),
                                    static_cast<int>(cn.size()), -1, 0) == 1;
}

bool set_validity(X509* cert, std::int64_t from, std::int64_t to) {
  return ASN1_TIME_adj(X509_get_notBefore(cert), static_cast<time_t>(from), 0, 0) != nullptr &&
         ASN1_TIME_adj(X509_get_notAfter(cert), static_cast<time_t>(to), 0, 0) != nullptr;
}

X509Ptr make_ca_certificate(EVP_PKEY* key, std::string_view instance, std::int64_t now) {
  X509Ptr cert(X509_new());
  if (!cert) return nullptr;
  std::string cn = "abox instance " + std::string(instance) + " CA";
  if (X509_set_version(cert.get(), X509_VERSION_3) != 1 || !set_random_serial(cert.get()) ||
      !set_name(X509_get_subject_name(cert.get()), cn) || !set_name(X509_get_issuer_name(cert.get()), cn) ||
      !set_validity(cert.get(), now - 3600, now + kCaLifetimeSeconds) ||
      X509_set_pubkey(cert.get(), key) != 1 ||
      !add_extension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !add_extension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !add_extension(cert.get(), cert.get(), NID_subject_key_identifier, "hash") ||
      X509_sign(cert.get(), key, EVP_sha256()) == 0) {
    return nullptr;
  }
  return cert;
}

}  // namespace

base::Result<void, std::string> ensure_private_dir(const std::string& dir) {
  if (dir.empty()) return base::Err{std::string("state folder: empty path")};
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return base::Err{dir + ": cannot create: " + errno_text()};
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return base::Err{dir + ": " + errno_text()};
  if (!S_ISDIR(st.st_mode)) return base::Err{dir + ": not a folder (symlinks are refused)"};
  if (st.st_uid != ::geteuid()) return base::Err{dir + ": owned by another user"};
  if ((st.st_mode & 077) != 0) return base::Err{dir + ": group or others can reach it: chmod 700 it"};
  return {};
}

InstanceCa::InstanceCa(EvpPkeyPtr key, X509Ptr cert)
    : key_(std::move(key)), certificate_(std::move(cert)), certificate_pem_(to_pem(certificate_.get())) {}

base::Result<std::unique_ptr<InstanceCa>, std::string> InstanceCa::load(const std::string& state_dir) {
  if (auto d = ensure_private_dir(state_dir); !d.ok()) return base::Err{d.error()};
  auto key_text = read_small_file(state_dir + "/ca.key", true);
  if (!key_text.ok()) return base::Err{key_text.error()};
  auto cert_text = read_small_file(state_dir + "/ca.pem", false);
  if (!cert_text.ok()) return base::Err{cert_text.error()};
  EvpPkeyPtr key = private_key_from_pem(*key_text);
  if (!key) return base::Err{state_dir + "/ca.key: not a PEM private key"};
  X509Ptr cert = certificate_from_pem(*cert_text);
  if (!cert) return base::Err{state_dir + "/ca.pem: not a PEM certificate"};
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    take_tls_error();
    return base::Err{state_dir + "/ca.pem: does not match ca.key"};
  }
  return std::unique_ptr<InstanceCa>(new InstanceCa(std::move(key), std::move(cert)));
}

base::Result<std::unique_ptr<InstanceCa>, std::string> InstanceCa::load_or_create(
    const std::string& state_dir, std::string_view instance, std::int64_t now_unix) {
  if (auto d = ensure_private_dir(state_dir); !d.ok()) return base::Err{d.error()};
  std::string key_path = state_dir + "/ca.key";
  struct stat st {};
  if (::lstat(key_path.c_str(), &st) == 0) {
    auto loaded = load(state_dir);
    if (!loaded.ok()) return loaded;
    // A state folder is one instance's: its CA names the instance that made
    // it. Another instance's guest must not trust this CA, nor get its
    // nonces (they come from the same folder).
    const std::string expected = "abox instance " + std::string(instance) + " CA";
    char cn[256] = {};
    const int n = X509_NAME_get_text_by_NID(X509_get_subject_name((*loaded)->certificate()), NID_commonName,
                                            cn, sizeof cn);
    const std::string got = n > 0 ? std::string(cn, static_cast<std::size_t>(n)) : std::string();
    if (got != expected) {
      std::string owner = got;
      if (owner.starts_with("abox instance ") && owner.ends_with(" CA"))
        owner = owner.substr(14, owner.size() - 17);
      return base::Err{state_dir + " belongs to instance '" + owner + "', not '" + std::string(instance) +
                       "' (its CA names it): use --instance " + owner + ", or another --state folder"};
    }
    return loaded;
  }

  EvpPkeyPtr key = generate_p256_key();
  if (!key) return base::Err{std::string("cannot generate the CA key: ") + take_tls_error()};
  X509Ptr cert = make_ca_certificate(key.get(), instance, now_unix);
  if (!cert) return base::Err{std::string("cannot make the CA certificate: ") + take_tls_error()};
  // The certificate first: a crash between the two leaves no key without
  // its certificate, and the next start makes both again.
  if (auto w = write_file_atomic(state_dir + "/ca.pem", to_pem(cert.get()), 0644); !w.ok()) {
    return base::Err{w.error()};
  }
  if (auto w = write_file_atomic(key_path, private_key_to_pem(key.get()), 0600); !w.ok()) {
    return base::Err{w.error()};
  }
  return std::unique_ptr<InstanceCa>(new InstanceCa(std::move(key), std::move(cert)));
}

std::unique_ptr<LeafCertificate> InstanceCa::mint_leaf(std::string_view name, std::int64_t now_unix) const {
  auto leaf = std::make_unique<LeafCertificate>();
  leaf->key = generate_p256_key();
  if (!leaf->key) return nullptr;
  X509Ptr cert(X509_new());
  if (!cert) return nullptr;
  std::string san = "DNS:" + std::string(name);
  leaf->not_after_unix = now_unix + kLeafLifetime.count();
  if (X509_set_version(cert.get(), X509_VERSION_3) != 1 || !set_random_serial(cert.get()) ||
      !set_name(X509_get_subject_name(cert.get()), name) ||
      X509_set_issuer_name(cert.get(), X509_get_subject_name(certificate_.get())) != 1 ||
      !set_validity(cert.get(), now_unix - kLeafBackdate.count(), leaf->not_after_unix) ||
      X509_set_pubkey(cert.get(), leaf->key.get()) != 1 ||
      !add_extension(cert.get(), certificate_.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !add_extension(cert.get(), certificate_.get(), NID_key_usage, "critical,digitalSignature") ||
      !add_extension(cert.get(), certificate_.get(), NID_ext_key_usage, "serverAuth") ||
      !add_extension(cert.get(), certificate_.get(), NID_subject_alt_name, san.c_str()) ||
      !add_extension(cert.get(), certificate_.get(), NID_authority_key_identifier, "keyid:always") ||
      X509_sign(cert.get(), key_.get(), EVP_sha256()) == 0) {
    take_tls_error();
    return nullptr;
  }
  leaf->certificate = std::move(cert);
  return leaf;
}

}  // namespace abox::broker
