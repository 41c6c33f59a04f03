#include "gateway/security/certs.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <memory>

#include "gateway/security/identity.h"
#include "tests/support/temp_dir.h"

namespace fedgate::gateway {
namespace {

using testing::TempDir;

std::unique_ptr<X509, decltype(&X509_free)> Load(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return {x, &X509_free};
}

// Verifies `leaf` against `ca` the way a TLS stack would, at the current time.
int VerifyChain(const std::string& ca_pem, const std::string& leaf_pem) {
  auto ca = Load(ca_pem);
  auto leaf = Load(leaf_pem);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca.get());
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf.get(), nullptr);
  X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_CLIENT);
  int ok = X509_verify_cert(ctx);
  int err = ok == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return err;
}

TEST(Certs, InitCaAndIssueProduceAVerifiableLeaf) {
  TempDir dir;
  ASSERT_TRUE(InitCa(dir / "ca", "aidc", 3650).ok());
  EXPECT_EQ(*CaFederation(dir / "ca"), "aidc");
  struct stat st;
  ASSERT_EQ(::stat((dir / "ca/ca-key.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the CA key must not be world readable";
  EXPECT_FALSE(InitCa(dir / "ca", "aidc", 3650).ok()) << "never overwrite a CA";

  ASSERT_TRUE(IssueToDir(dir / "ca", dir / "bj", "spiffe://aidc/site/cn-beijing/gateway",
                         {"localhost"}, {"127.0.0.1"}, 397)
                  .ok());
  const std::string ca = testing::ReadText(dir / "bj/ca.pem");
  const std::string cert = testing::ReadText(dir / "bj/cert.pem");
  EXPECT_EQ(VerifyChain(ca, cert), X509_V_OK);
  ASSERT_EQ(::stat((dir / "bj/key.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto id = IdentityFromCertPem(cert);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->site, "cn-beijing");

  auto x = Load(cert);
  EXPECT_EQ(X509_check_ca(x.get()), 0) << "a leaf is not a CA";
  const uint32_t xku = X509_get_extended_key_usage(x.get());
  EXPECT_TRUE(xku & XKU_SSL_SERVER);
  EXPECT_TRUE(xku & XKU_SSL_CLIENT);
  EVP_PKEY* pub = X509_get0_pubkey(x.get());
  EXPECT_EQ(EVP_PKEY_get_base_id(pub), EVP_PKEY_EC);
  EXPECT_EQ(EVP_PKEY_get_bits(pub), 256);
  // Sensible validity: starts now (small backdate), ends in about 397 days.
  const ASN1_TIME* nb = X509_get0_notBefore(x.get());
  const ASN1_TIME* na = X509_get0_notAfter(x.get());
  int days = 0, secs = 0;
  ASSERT_EQ(ASN1_TIME_diff(&days, &secs, nb, na), 1);
  EXPECT_EQ(days, 397);
  EXPECT_LT(X509_cmp_current_time(nb), 0);
}

TEST(Certs, ExpiredAndForeignLeavesFailVerification) {
  CertSpec ca_spec;
  ca_spec.common_name = "ca";
  ca_spec.organization = "aidc";
  ca_spec.is_ca = true;
  auto ca = *MakeCertificate(ca_spec, nullptr);
  auto other = *MakeCertificate(ca_spec, nullptr);
  CertSpec leaf;
  leaf.common_name = "x";
  leaf.uris = {"spiffe://aidc/site/a/gateway"};
  leaf.not_before_offset_seconds = -2 * 86400;
  leaf.valid_seconds = 86400;
  auto expired = *MakeCertificate(leaf, &ca);
  EXPECT_EQ(VerifyChain(ca.cert_pem, expired.cert_pem), X509_V_ERR_CERT_HAS_EXPIRED);
  leaf.not_before_offset_seconds = -300;
  auto foreign = *MakeCertificate(leaf, &other);
  EXPECT_NE(VerifyChain(ca.cert_pem, foreign.cert_pem), X509_V_OK);
}

}  // namespace
}  // namespace fedgate::gateway
