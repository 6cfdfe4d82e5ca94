#include "common/core/bad_records.h"

#include "common/core/error.h"
#include "common/core/log.h"

namespace zlm {

void BadRecords::add(const std::string& where, const std::string& what) {
  if (++count_ == 1) first_where_ = where, first_what_ = what;
  if (count_ <= log_first_) ZLM_LOG_WRN("%s: skipped bad record: %s", where.c_str(), what.c_str());
  if (count_ == log_first_ + 1) ZLM_LOG_WRN("more bad records: not logged one by one (see the summary)");
  if (max_ >= 0 && count_ > static_cast<uint64_t>(max_))
    throw Error(ErrorKind::Format, "%s: more than --max-bad-records %ld bad records (this one: %s)", where.c_str(), (long)max_,
                what.c_str());
}

void BadRecords::fail_if_all_bad(uint64_t records, const std::string& input) const {
  if (records == 0 || count_ < records) return;
  throw Error(ErrorKind::Format, "%s: every one of its %lu records is bad, so nothing was written; the first, %s: %s ---> HINT: check the "
              "input's format and the keys it is read with", input.c_str(), (unsigned long)records, first_where_.c_str(), first_what_.c_str());
}

}  // namespace zlm
