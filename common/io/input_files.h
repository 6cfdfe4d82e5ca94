// Expands an --input argument into the list of files to read.
//
//   auto files = zlm::expand_inputs("data/*.jsonl.zst");
//
// An argument is, in this order: "-" (standard input); an existing regular
// file; an existing directory (its regular files whose names end in .json,
// .jsonl, .txt or one of those plus .gz/.xz/.zst, non-recursive); otherwise a
// glob pattern (glob(3), sorted). Files from a directory or a glob come in
// byte-wise sorted order, so runs are reproducible. Nothing matching is
// zlm::Error(Usage) naming the argument. Cost: one directory scan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zlm {

std::vector<std::string> expand_inputs(const std::string& spec);
std::vector<std::string> expand_inputs(const std::vector<std::string>& specs);

// Number `i` of `count` numbered files (part-00042.jsonl), zero-padded to 5
// digits or to the width of count - 1 if wider: every name of a set has the
// same width, so expand_inputs' byte-wise order is the numbers' order.
std::string file_number(uint64_t i, uint64_t count);

}  // namespace zlm
