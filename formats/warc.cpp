#include "formats/warc.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/core/ascii.h"
#include "common/core/error.h"

namespace zlm::formats {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::string gzip_member(std::string_view data) {
  z_stream z{};
  ZLM_CHECK(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK, "deflateInit2");
  std::string out(deflateBound(&z, data.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  ZLM_CHECK(rc == Z_STREAM_END, "deflate: %d", rc);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Inflates a whole zlib, gzip or raw-deflate body, up to max_out bytes.
bool inflate_all(std::string_view in, std::string& out, std::string& error, uint64_t max_out) {
  for (int bits : {15 + 32, -15}) {
    z_stream z{};
    if (inflateInit2(&z, bits) != Z_OK) break;
    out.clear();
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    char buf[65536];
    int rc = Z_OK;
    while (rc == Z_OK) {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof buf;
      rc = inflate(&z, Z_NO_FLUSH);
      out.append(buf, sizeof buf - z.avail_out);
      if (rc == Z_BUF_ERROR && z.avail_in == 0) break;
      if (out.size() > max_out) {
        inflateEnd(&z);
        error = "body over " + std::to_string(max_out) + " bytes once decompressed";
        return false;
      }
    }
    inflateEnd(&z);
    if (rc == Z_STREAM_END) return true;
  }
  error = "body is not valid gzip/deflate";
  return false;
}

bool unzstd_all(std::string_view in, std::string& out, std::string& error, uint64_t max_out) {
  std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> ds(ZSTD_createDStream(), ZSTD_freeDStream);
  ZSTD_initDStream(ds.get());
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  char buf[65536];
  out.clear();
  size_t rc = 1;
  while (input.pos < input.size || rc != 0) {
    ZSTD_outBuffer output{buf, sizeof buf, 0};
    rc = ZSTD_decompressStream(ds.get(), &output, &input);
    if (ZSTD_isError(rc)) {
      error = std::string("body is not valid zstd: ") + ZSTD_getErrorName(rc);
      return false;
    }
    out.append(buf, output.pos);
    if (out.size() > max_out) {
      error = "body over " + std::to_string(max_out) + " bytes once decompressed";
      return false;
    }
    if (output.pos == 0 && input.pos == input.size) break;
  }
  return true;
}

bool dechunk(std::string_view in, std::string& out, std::string& error) {
  out.clear();
  size_t pos = 0;
  while (true) {
    const size_t eol = in.find("\r\n", pos);
    if (eol == std::string_view::npos) break;  // cut short: keep what arrived
    const std::string size_text(trim(in.substr(pos, eol - pos)));
    char* end = nullptr;
    const unsigned long long size = std::strtoull(size_text.c_str(), &end, 16);
    if (end == size_text.c_str()) {
      error = "bad chunk size";
      return false;
    }
    pos = eol + 2;
    if (size == 0) break;
    if (size > in.size() - pos) {
      out.append(in.substr(pos));
      break;
    }
    out.append(in.substr(pos, size));
    pos += size + 2;
  }
  return true;
}

}  // namespace

std::string warc_record(const WarcFields& f, std::string_view block) {
  std::string r = "WARC/1.1\r\n";
  auto add = [&](std::string_view name, std::string_view value) {
    if (value.empty()) return;
    r.append(name).append(": ").append(value).append("\r\n");
  };
  add("WARC-Type", f.type);
  add("WARC-Record-ID", f.record_id);
  add("WARC-Date", f.date);
  add("WARC-Target-URI", f.target_uri);
  for (const auto& [k, v] : f.extra) add(k, v);
  add("Content-Type", f.content_type);
  add("Content-Length", std::to_string(block.size()));
  r.append("\r\n").append(block).append("\r\n\r\n");
  return r;
}

std::string warc_record_gz(const WarcFields& fields, std::string_view block) {
  return gzip_member(warc_record(fields, block));
}

std::string warc_record_id(uint64_t hi, uint64_t lo) {
  hi = (hi & ~0xF000ull) | 0x4000ull;                       // version 4
  lo = (lo & ~(0xC000ull << 48)) | (0x8000ull << 48);        // variant 10
  return strprintf("<urn:uuid:%08llx-%04llx-%04llx-%04llx-%012llx>", static_cast<unsigned long long>(hi >> 32),
                   static_cast<unsigned long long>((hi >> 16) & 0xFFFF), static_cast<unsigned long long>(hi & 0xFFFF),
                   static_cast<unsigned long long>(lo >> 48), static_cast<unsigned long long>(lo & 0xFFFFFFFFFFFFull));
}

std::string warc_date_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string WarcRecord::field(std::string_view name) const {
  for (const auto& [k, v] : fields)
    if (ascii_iequals(k, name)) return v;
  return {};
}

struct WarcReader::Inflate {
  z_stream z{};
  std::string in;
  bool member_done = false;
};

WarcReader::WarcReader(std::string path, uint64_t max_block) : path_(std::move(path)), max_block_(max_block) {
  file_ = std::fopen(path_.c_str(), "rb");
  if (!file_) throw_errno("cannot open WARC", path_);
  unsigned char magic[2] = {0, 0};
  const size_t got = std::fread(magic, 1, 2, file_);
  std::rewind(file_);
  if (got == 2 && magic[0] == 0x1F && magic[1] == 0x8B) {
    inflate_ = std::make_unique<Inflate>();
    ZLM_CHECK(inflateInit2(&inflate_->z, 15 + 16) == Z_OK, "inflateInit2");
  }
}

WarcReader::~WarcReader() {
  if (inflate_) inflateEnd(&inflate_->z);
  if (file_) std::fclose(file_);
}

bool WarcReader::fill(size_t want) {
  while (buffer_.size() - pos_ < want && !eof_) {
    if (pos_ > (1u << 20) && pos_ * 2 > buffer_.size()) {
      buffer_.erase(0, pos_);
      consumed_ += pos_;
      pos_ = 0;
    }
    char chunk[1 << 16];
    if (!inflate_) {
      const size_t n = std::fread(chunk, 1, sizeof chunk, file_);
      if (n == 0) eof_ = true;
      buffer_.append(chunk, n);
      continue;
    }
    Inflate& f = *inflate_;
    if (f.z.avail_in == 0) {
      f.in.resize(1 << 16);
      const size_t n = std::fread(f.in.data(), 1, f.in.size(), file_);
      if (n == 0) {
        eof_ = true;
        break;
      }
      f.z.next_in = reinterpret_cast<Bytef*>(f.in.data());
      f.z.avail_in = static_cast<uInt>(n);
    }
    f.z.next_out = reinterpret_cast<Bytef*>(chunk);
    f.z.avail_out = sizeof chunk;
    const int rc = inflate(&f.z, Z_NO_FLUSH);
    buffer_.append(chunk, sizeof chunk - f.z.avail_out);
    if (rc == Z_STREAM_END) {
      inflateReset(&f.z);  // the next gzip member follows
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      throw Error(ErrorKind::Format, "%s: corrupt gzip data near uncompressed byte %llu (zlib %d)", path_.c_str(),
                  static_cast<unsigned long long>(consumed_ + buffer_.size()), rc);
    }
  }
  return buffer_.size() - pos_ >= want;
}

bool WarcReader::next(WarcRecord& record) {
  // Skip blank lines between records.
  while (fill(1) && (buffer_[pos_] == '\r' || buffer_[pos_] == '\n')) ++pos_;
  if (!fill(1)) return false;
  record = {};
  record.offset = consumed_ + pos_;
  size_t header_end;
  while ((header_end = buffer_.find("\r\n\r\n", pos_)) == std::string::npos) {
    if (!fill(buffer_.size() - pos_ + 4096) || buffer_.size() - pos_ > (1u << 20))
      throw Error(ErrorKind::Format, "%s: WARC record at byte %llu has no end of its header", path_.c_str(),
                  static_cast<unsigned long long>(record.offset));
  }
  const std::string_view head(buffer_.data() + pos_, header_end - pos_);
  if (head.substr(0, 5) != "WARC/")
    throw Error(ErrorKind::Format, "%s: byte %llu: not a WARC record (no 'WARC/' version line)", path_.c_str(),
                static_cast<unsigned long long>(record.offset));
  size_t line_start = head.find("\r\n");
  long long length = -1;
  while (line_start != std::string_view::npos && line_start + 2 <= head.size()) {
    const size_t s = line_start + 2;
    size_t e = head.find("\r\n", s);
    if (e == std::string_view::npos) e = head.size();
    const std::string_view line = head.substr(s, e - s);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos) {
      record.fields.emplace_back(std::string(trim(line.substr(0, colon))), std::string(trim(line.substr(colon + 1))));
      if (ascii_iequals(record.fields.back().first, "Content-Length")) length = std::atoll(record.fields.back().second.c_str());
    }
    line_start = e < head.size() ? e : std::string_view::npos;
  }
  if (length < 0)
    throw Error(ErrorKind::Format, "%s: byte %llu: WARC record without Content-Length", path_.c_str(),
                static_cast<unsigned long long>(record.offset));
  if (static_cast<uint64_t>(length) > max_block_)
    throw Error(ErrorKind::Format, "%s: byte %llu: WARC record of %lld bytes, over the %llu this reader takes",
                path_.c_str(), static_cast<unsigned long long>(record.offset), length,
                static_cast<unsigned long long>(max_block_));
  pos_ = header_end + 4;
  if (!fill(static_cast<size_t>(length)))
    throw Error(ErrorKind::Format, "%s: byte %llu: WARC record cut short (%lld bytes of block announced, %zu there)",
                path_.c_str(), static_cast<unsigned long long>(record.offset), length, buffer_.size() - pos_);
  record.block.assign(buffer_, pos_, static_cast<size_t>(length));
  pos_ += static_cast<size_t>(length);
  return true;
}

bool parse_http_response(std::string_view block, HttpResponse& out, std::string& error, uint64_t max_body) {
  out = {};
  size_t head_end = block.find("\r\n\r\n");
  size_t body_start = head_end + 4;
  if (head_end == std::string_view::npos) {
    head_end = block.find("\n\n");
    body_start = head_end + 2;
  }
  if (head_end == std::string_view::npos || block.substr(0, 5) != "HTTP/") {
    error = "not an HTTP response";
    return false;
  }
  const std::string_view head = block.substr(0, head_end);
  const size_t eol = head.find('\n');
  const std::string_view status_line = head.substr(0, eol);
  const size_t sp = status_line.find(' ');
  out.status = sp == std::string_view::npos ? 0 : std::atoi(std::string(status_line.substr(sp + 1, 3)).c_str());
  std::string encoding, transfer;
  for (size_t s = eol; s != std::string_view::npos && s < head.size();) {
    const size_t e = head.find('\n', s + 1);
    const std::string_view line = trim(head.substr(s + 1, (e == std::string_view::npos ? head.size() : e) - s - 1));
    s = e;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    out.headers.emplace_back(std::string(trim(line.substr(0, colon))), std::string(trim(line.substr(colon + 1))));
    const auto& [k, v] = out.headers.back();
    if (ascii_iequals(k, "Content-Type")) out.content_type = v;
    if (ascii_iequals(k, "Content-Encoding")) encoding = v;
    if (ascii_iequals(k, "Transfer-Encoding")) transfer = v;
  }
  std::string body(block.substr(body_start));
  std::string decoded;
  if (transfer.find("chunked") != std::string::npos) {
    if (!dechunk(body, decoded, error)) return false;
    body.swap(decoded);
  }
  encoding = ascii_lower(encoding);
  if (encoding == "gzip" || encoding == "x-gzip" || encoding == "deflate") {
    if (!inflate_all(body, decoded, error, max_body)) return false;
    body.swap(decoded);
  } else if (encoding == "zstd") {
    if (!unzstd_all(body, decoded, error, max_body)) return false;
    body.swap(decoded);
  } else if (!encoding.empty() && encoding != "identity") {
    error = "content-encoding '" + encoding + "' not supported";
    return false;
  }
  out.body = std::move(body);
  return true;
}

}  // namespace zlm::formats
