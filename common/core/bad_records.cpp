#include "common/core/bad_records.h"

#include "common/core/error.h"
#include "common/core/log.h"

namespace zlm {

void BadRecords::add(const std::string& where, const std::string& what) {
  ++count_;
  if (count_ <= log_first_) ZLM_LOG_WRN("%s: skipped bad record: %s", where.c_str(), what.c_str());
  if (count_ == log_first_ + 1) ZLM_LOG_WRN("more bad records: not logged one by one (see the summary)");
  if (max_ >= 0 && count_ > static_cast<uint64_t>(max_))
    throw Error(ErrorKind::Format, "%s: more than --max-bad-records %ld bad records (this one: %s)", where.c_str(), (long)max_,
                what.c_str());
}

}  // namespace zlm
