// Helpers for the unit tests: a temporary directory and file helpers.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace zlm::test {

inline std::string data_path(const std::string& rel) { return std::string(ZLM_TEST_DATA_DIR) + "/" + rel; }

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("zlm_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& root() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void spit(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

}  // namespace zlm::test

// Expects `stmt` to throw zlm::Error of `kind` whose message contains `needle`.
#define EXPECT_ZLM_ERROR(stmt, expected_kind, needle)                                             \
  do {                                                                                   \
    try {                                                                                \
      stmt;                                                                              \
      ADD_FAILURE() << "expected zlm::Error containing '" << (needle) << "'";           \
    } catch (const ::zlm::Error& e) {                                                    \
      EXPECT_EQ(e.kind(), expected_kind) << e.what();                                          \
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();      \
    }                                                                                    \
  } while (0)
