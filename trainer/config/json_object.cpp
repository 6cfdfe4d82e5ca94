#include "trainer/config/json_object.h"

#include <cmath>
#include <functional>
#include <map>

#include "common/core/error.h"
#include "common/core/files.h"
#include "common/core/output_file.h"

#ifdef ZLM_HAVE_SIMDJSON
#include <simdjson.h>
#endif

namespace zlm::trainer {

#ifdef ZLM_HAVE_SIMDJSON

using simdjson::dom::element;

struct JsonObjectView::Doc {
  std::string path;
  RepeatedKeys repeated = RepeatedKeys::kLastWins;
  simdjson::padded_string text;
  simdjson::dom::parser parser;
};

struct JsonObjectView::Fields {
  std::vector<std::pair<std::string, element>> in_order;  // first occurrence of each key, in file order
  std::map<std::string, element> last;                     // each key's last value
};

namespace {

// Where a document simdjson's DOM parser refused goes wrong, as " at line L,
// column C" (empty when it cannot tell): the on-demand parser walks it value
// by value and stops at the first bad one.
std::string error_location(const simdjson::padded_string& text) {
  namespace od = simdjson::ondemand;
  std::function<simdjson::error_code(od::value)> walk = [&](od::value v) -> simdjson::error_code {
    od::json_type t;
    if (auto e = v.type().get(t)) return e;
    if (t == od::json_type::object) {
      for (auto field : v.get_object()) {
        od::value inner;
        if (auto e = field.value().get(inner)) return e;
        if (auto e = walk(inner)) return e;
      }
      return simdjson::SUCCESS;
    }
    if (t == od::json_type::array) {
      for (auto item : v.get_array()) {
        od::value inner;
        if (auto e = item.get(inner)) return e;
        if (auto e = walk(inner)) return e;
      }
      return simdjson::SUCCESS;
    }
    if (t == od::json_type::string) return v.get_string().error();
    if (t == od::json_type::number) return v.get_double().error();
    if (t == od::json_type::boolean) return v.get_bool().error();
    return v.is_null().error();
  };
  od::parser parser;
  od::document doc;
  od::value root;
  const char* at = nullptr;
  if (parser.iterate(text).get(doc)) return "";
  if ((!doc.get_value().get(root) && !walk(root)) || doc.current_location().get(at)) return "";  // nothing found, or at the end
  size_t line = 1, column = 1;
  for (const char* c = text.data(); c < at; ++c) {
    if (*c == '\n') ++line, column = 1;
    else ++column;
  }
  return strprintf(" at line %zu, column %zu", line, column);
}

std::shared_ptr<JsonObjectView::Fields> fields_of(simdjson::dom::object obj, const std::string& path, const std::string& where,
                                                  RepeatedKeys repeated) {
  auto f = std::make_shared<JsonObjectView::Fields>();
  for (auto [key, value] : obj) {
    const std::string k(key);
    if (!f->last.count(k)) f->in_order.emplace_back(k, value);
    else if (repeated == RepeatedKeys::kRefuse)
      throw Error(ErrorKind::Format, "%s: %s%s is given twice (DeepSpeed refuses a repeated key too)", path.c_str(), where.empty() ? "" : (where + ".").c_str(),
                  k.c_str());
    f->last[k] = value;  // Python's dict: the last value of a repeated key
  }
  return f;
}

}  // namespace

bool json_settings_supported() { return true; }

JsonObjectView read_json_object(const std::string& path, RepeatedKeys repeated) {
  auto doc = std::make_shared<JsonObjectView::Doc>();
  doc->path = path;
  doc->repeated = repeated;
  doc->text = simdjson::padded_string(read_file(path));
  element root;
  if (auto err = doc->parser.parse(doc->text).get(root))
    throw Error(ErrorKind::Format, "%s: not valid JSON%s: %s", path.c_str(), error_location(doc->text).c_str(), simdjson::error_message(err));
  simdjson::dom::object obj;
  if (root.get_object().get(obj)) throw Error(ErrorKind::Format, "%s: the top level must be a JSON object", path.c_str());
  JsonObjectView v;
  v.fields_ = fields_of(obj, path, "", repeated);
  v.doc_ = std::move(doc);
  return v;
}

namespace {
element at(const JsonObjectView::Fields& f, const JsonObjectView& v, const std::string& key) {
  auto it = f.last.find(key);
  if (it == f.last.end()) v.fail(key, "missing");
  return it->second;
}
}  // namespace

bool JsonObjectView::has(const std::string& key) const { return fields_->last.count(key) > 0; }
bool JsonObjectView::is_null(const std::string& key) const { return at(*fields_, *this, key).is_null(); }

double JsonObjectView::number(const std::string& key) const {
  const element e = at(*fields_, *this, key);
  double d;
  if (!e.is_number() || e.get_double().get(d) || !std::isfinite(d)) fail(key, "must be a number");
  return d;
}

int64_t JsonObjectView::integer(const std::string& key) const {
  const double d = number(key);
  if (d != std::floor(d) || std::fabs(d) > 9.0e15) fail(key, "must be an integer");
  return static_cast<int64_t>(d);
}

bool JsonObjectView::boolean(const std::string& key) const {
  bool b;
  if (at(*fields_, *this, key).get_bool().get(b)) fail(key, "must be true or false");
  return b;
}

std::string JsonObjectView::string(const std::string& key) const {
  std::string_view s;
  if (at(*fields_, *this, key).get_string().get(s)) fail(key, "must be a string");
  return std::string(s);
}

std::vector<double> JsonObjectView::numbers(const std::string& key) const {
  simdjson::dom::array arr;
  if (at(*fields_, *this, key).get_array().get(arr)) fail(key, "must be an array of numbers");
  std::vector<double> out;
  for (element e : arr) {
    double d;
    if (!e.is_number() || e.get_double().get(d) || !std::isfinite(d)) fail(key, "must be an array of numbers");
    out.push_back(d);
  }
  return out;
}

JsonObjectView JsonObjectView::object(const std::string& key) const {
  simdjson::dom::object obj;
  if (at(*fields_, *this, key).get_object().get(obj)) fail(key, "must be a JSON object");
  JsonObjectView v;
  v.doc_ = doc_;
  v.where_ = name(key);
  v.fields_ = fields_of(obj, doc_->path, v.where_, doc_->repeated);
  return v;
}

std::vector<std::string> JsonObjectView::check_keys(const std::set<std::string>& known, const std::set<std::string>& inert) const {
  std::vector<std::string> out;
  for (const auto& [k, value] : fields_->in_order) {
    if (known.count(k)) continue;
    if (inert.count(k)) {
      out.push_back(k);
      continue;
    }
    fail(k, "not a setting zerolm knows (unsupported or misspelt)");
  }
  return out;
}

const std::string& JsonObjectView::path() const { return doc_->path; }

#else  // no simdjson: a clear error wherever JSON settings are asked for

struct JsonObjectView::Doc {
  std::string path;
};
struct JsonObjectView::Fields {};

bool json_settings_supported() { return false; }

JsonObjectView read_json_object(const std::string& path, RepeatedKeys) {
  throw Error(ErrorKind::Usage, "%s: this build reads no JSON settings (built without simdjson, Debian's libsimdjson-dev)", path.c_str());
}

bool JsonObjectView::has(const std::string&) const { return false; }
bool JsonObjectView::is_null(const std::string&) const { return false; }
double JsonObjectView::number(const std::string& key) const { fail(key, "unreadable"); }
int64_t JsonObjectView::integer(const std::string& key) const { fail(key, "unreadable"); }
bool JsonObjectView::boolean(const std::string& key) const { fail(key, "unreadable"); }
std::string JsonObjectView::string(const std::string& key) const { fail(key, "unreadable"); }
std::vector<double> JsonObjectView::numbers(const std::string& key) const { fail(key, "unreadable"); }
JsonObjectView JsonObjectView::object(const std::string& key) const { fail(key, "unreadable"); }
std::vector<std::string> JsonObjectView::check_keys(const std::set<std::string>&, const std::set<std::string>&) const { return {}; }
const std::string& JsonObjectView::path() const { return doc_->path; }

#endif

std::string JsonObjectView::name(const std::string& key) const { return where_.empty() ? key : where_ + "." + key; }

void JsonObjectView::fail(const std::string& key, const std::string& why) const {
  throw Error(ErrorKind::Usage, "%s: %s: %s", path().c_str(), name(key).c_str(), why.c_str());
}

}  // namespace zlm::trainer
