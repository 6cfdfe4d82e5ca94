// find_duplicates: near-duplicate candidates by MinHash LSH with exact
// Jaccard verification (Megatron's tools/openwebtext/find_duplicates.py,
// docs/compatibility.md, "OpenWebText scripts"), deterministic for any thread count.
//
// 1. Fingerprint every document of --inputs (file key pairs; the id is the
//    `key` field, the text the `text` field) and of --load-fingerprints files.
// 2. Band the signatures (num_bands bands of num_seeds/num_bands rows) and find
//    the buckets by sorting (band hash, document) records per band.
// 3. Verify each bucket as Megatron does, except that the "main" document of a
//    round is the first in input order (Megatron picks one at random): compare
//    it with every other member on exact character n-gram Jaccard; members
//    above --jaccard-threshold are reported and leave the bucket; repeat
//    --heuristic-iter rounds (-1: until the bucket is exhausted). A pair
//    already verified in an earlier band is not reported again.
// 4. Write {"main id": [{"other id": similarity}, ...]} lines in band and
//    bucket order; --save-fingerprints writes formats/signature_file.h.
// Memory: num_seeds * 4 bytes + the id per document, plus the texts of the
// documents that fall into a candidate bucket (read in a second pass).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/io/cli.h"
#include "common/dedup/lsh.h"
#include "common/core/stats.h"

namespace zlm::find_duplicates {

struct FindDuplicatesOptions : LshSettings {
  std::vector<std::string> inputs;  // file key file key ...
  std::string output;
  std::string save_fingerprints;
  std::vector<std::string> load_fingerprints;
  std::string text_key = "text";
  int threads = 1;
  int64_t max_bad_records = -1;
};

void run(const FindDuplicatesOptions& options, const CommonFlags& common, Stats& stats);

}  // namespace zlm::find_duplicates
