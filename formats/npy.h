// NumPy .npy files (format version 1.0), as numpy.save writes them:
//   magic "\x93NUMPY", version 1 0, u16 LE header length, the header (a Python
//   dict literal "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }"
//   padded with spaces and a final '\n' so the data starts at a multiple of 64),
//   then the C-order little-endian data.
// Used for Megatron's GPTDataset index caches (docs/compatibility.md, "GPTDataset sample indexing").
//
//   zlm::formats::write_npy("x.npy", "<i4", {3, 2}, data, 24);   // atomic
//   zlm::formats::NpyArray a = zlm::formats::read_npy("x.npy");  // throws zlm::Error naming the file
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zlm::formats {

struct NpyArray {
  std::string descr;           // "<i4", "<u4", "<i8", ...
  std::vector<int64_t> shape;
  std::string data;            // raw bytes
  int64_t count() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

std::string npy_bytes(const std::string& descr, const std::vector<int64_t>& shape, const void* data, size_t bytes);
void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape, const void* data, size_t bytes);
NpyArray read_npy(const std::string& path);

}  // namespace zlm::formats
