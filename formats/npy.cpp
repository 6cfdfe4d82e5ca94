#include "formats/npy.h"

#include <cstring>
#include <regex>

#include "common/core/error.h"
#include "common/core/files.h"
#include "common/core/output_file.h"

namespace zlm::formats {

std::string npy_bytes(const std::string& descr, const std::vector<int64_t>& shape, const void* data, size_t bytes) {
  std::string dims;  // Python tuple syntax: "()", "(3,)", "(3, 2)"
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  out.append(reinterpret_cast<const char*>(&len), 2);
  out += header;
  out.append(static_cast<const char*>(data), bytes);
  return out;
}

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape, const void* data, size_t bytes) {
  write_file_atomic(path, npy_bytes(descr, shape, data, bytes));
}

NpyArray read_npy(const std::string& path) {
  std::string s = read_file(path);
  auto bad = [&](const char* what) { return Error(ErrorKind::Format, "%s: not a usable .npy file (%s)", path.c_str(), what); };
  if (s.size() < 10 || s.compare(0, 6, "\x93NUMPY") != 0) throw bad("magic");
  size_t hlen, start;
  if (s[6] == 1) {
    uint16_t h;
    std::memcpy(&h, s.data() + 8, 2);
    hlen = h;
    start = 10;
  } else if (s[6] == 2 || s[6] == 3) {
    uint32_t h;
    if (s.size() < 12) throw bad("truncated header");
    std::memcpy(&h, s.data() + 8, 4);
    hlen = h;
    start = 12;
  } else {
    throw bad("unknown version");
  }
  if (start + hlen > s.size()) throw bad("truncated header");
  std::string header = s.substr(start, hlen);
  std::smatch m;
  NpyArray a;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']+)'"))) throw bad("no descr");
  a.descr = m[1];
  if (std::regex_search(header, m, std::regex("'fortran_order':\\s*True"))) throw bad("Fortran order");
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)"))) throw bad("no shape");
  std::string dims = m[1];
  static const std::regex number("[0-9]+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), number); it != std::sregex_iterator(); ++it)
    a.shape.push_back(std::stoll(it->str()));
  a.data = s.substr(start + hlen);
  size_t item = a.descr.size() >= 3 ? static_cast<size_t>(std::stoi(a.descr.substr(2))) : 0;
  if (item == 0 || a.data.size() != static_cast<size_t>(a.count()) * item) throw bad("data size does not match the shape");
  return a;
}

}  // namespace zlm::formats
