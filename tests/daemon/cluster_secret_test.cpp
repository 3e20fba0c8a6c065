// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The cluster secret file's checks and the pair keys derived from it
// (daemon/cluster_secret.h, docs/spec.md 9.3).
#include "cluster_secret.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace metaroce::daemon {
namespace {

const std::string kHex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

class SecretFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/metaroce-secret.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& text, mode_t mode) {
    const std::string path = dir_ + "/key" + std::to_string(n_++);
    std::ofstream(path) << text;
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path;
  }
  std::string dir_;
  int n_ = 0;
};

TEST_F(SecretFile, OwnerOnlyHexIsRead) {
  std::string error;
  const auto secret = load_cluster_secret(write(kHex + "\n", 0600), error);
  ASSERT_TRUE(secret) << error;
  EXPECT_EQ(secret->size(), 32u);
  EXPECT_EQ((*secret)[1], 0x11);
  EXPECT_TRUE(load_cluster_secret(write(kHex + kHex, 0400), error)) << error;
}

TEST_F(SecretFile, AnythingOthersMayReadOrWriteIsRefused) {
  for (const mode_t mode : {0604, 0640, 0644, 0620, 0602, 0666}) {
    std::string error;
    EXPECT_FALSE(load_cluster_secret(write(kHex, mode), error)) << std::oct << mode;
    EXPECT_NE(error.find("chmod 600"), std::string::npos) << error;
  }
}

TEST_F(SecretFile, BadContentsAndNonFilesAreRefused) {
  std::string error;
  EXPECT_FALSE(load_cluster_secret(write(kHex.substr(0, 62), 0600), error)) << "31 bytes";
  EXPECT_FALSE(load_cluster_secret(write(kHex + kHex + "00", 0600), error)) << "65 bytes";
  EXPECT_FALSE(load_cluster_secret(write(kHex.substr(0, 63), 0600), error)) << "odd digits";
  EXPECT_FALSE(load_cluster_secret(write("not a secret, not hex at all, but long enough to be one", 0600), error));
  EXPECT_FALSE(load_cluster_secret(dir_, error)) << "a directory";
  EXPECT_FALSE(load_cluster_secret(dir_ + "/missing", error));
  const std::string target = write(kHex, 0600);
  const std::string link = dir_ + "/link";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  EXPECT_FALSE(load_cluster_secret(link, error)) << "a symlink";
}

TEST(PairKeys, BothEndsDeriveTheSameKeyWithOppositeRoles) {
  const std::vector<uint8_t> secret(32, 0x42);
  std::string error;
  const auto ab = derive_pair_key(secret, "10.0.0.1", 4792, "10.0.0.2", 4793, error);
  const auto ba = derive_pair_key(secret, "10.0.0.2", 4793, "10.0.0.1", 4792, error);
  ASSERT_TRUE(ab && ba) << error;
  EXPECT_EQ(ab->key, ba->key);
  EXPECT_EQ(ab->role ^ ba->role, 1);
  // IPv4 and its IPv4-mapped IPv6 form name the same endpoint.
  const auto mapped = derive_pair_key(secret, "::ffff:10.0.0.1", 4792, "10.0.0.2", 4793, error);
  ASSERT_TRUE(mapped);
  EXPECT_EQ(mapped->key, ab->key);
  // Any other endpoint, port or secret gives another key.
  for (const auto& other :
       {derive_pair_key(secret, "10.0.0.1", 4794, "10.0.0.2", 4793, error),
        derive_pair_key(secret, "10.0.0.3", 4792, "10.0.0.2", 4793, error),
        derive_pair_key(std::vector<uint8_t>(32, 0x43), "10.0.0.1", 4792, "10.0.0.2", 4793, error)}) {
    ASSERT_TRUE(other);
    EXPECT_NE(other->key, ab->key);
  }
  EXPECT_FALSE(derive_pair_key(secret, "10.0.0.1", 4792, "host.example", 4793, error));
}

TEST(PairKeys, HexRoundTrip) {
  transport::PairKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(i * 37);
  transport::PairKey back{};
  ASSERT_TRUE(from_hex(to_hex(k), back));
  EXPECT_EQ(back, k);
  EXPECT_FALSE(from_hex("zz", back));
}

}  // namespace
}  // namespace metaroce::daemon
