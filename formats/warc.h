// WARC/1.1 files (ISO 28500:2017; the format web archives and Common Crawl use),
// as download_urls writes and reads them (docs/design.md, "download_urls").
//
// A record is a version line "WARC/1.1", named fields ("WARC-Type: response"),
// an empty line, a content block of Content-Length bytes, and two CRLFs. We write
// one gzip member per record (the ".warc.gz" convention: a reader can seek to any
// record, and a file cut between members stays readable up to the cut), and read
// files gzip-compressed (one member per record or not) or plain.
//
//   std::string rec = zlm::formats::warc_record_gz({.type = "response", .target_uri = url, ...}, http_block);
//   zlm::formats::WarcReader in("crawl.warc.gz");
//   zlm::formats::WarcRecord r;
//   while (in.next(r)) { ... r.field("WARC-Type") ... r.block ... }
//
// A malformed record (bad version line, no Content-Length, a block cut short)
// throws zlm::Error(Format) naming the file and the byte offset of the record
// (in the uncompressed stream) — a WARC has no line to resynchronise on.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zlm::formats {

struct WarcFields {
  std::string type;          // WARC-Type: warcinfo, response, request, resource, metadata, ...
  std::string target_uri;    // WARC-Target-URI (not for warcinfo)
  std::string date;          // WARC-Date, e.g. 2026-11-26T02:00:00Z
  std::string record_id;     // WARC-Record-ID, "<urn:uuid:...>"
  std::string content_type;  // "application/http;msgtype=response", "application/warc-fields"
  std::vector<std::pair<std::string, std::string>> extra;  // further named fields, in order
};

// One record as a complete gzip member.
std::string warc_record_gz(const WarcFields& fields, std::string_view block);
// The same record uncompressed.
std::string warc_record(const WarcFields& fields, std::string_view block);

// "<urn:uuid:...>" with a version-4 layout, from 128 bits the caller supplies (a hash:
// record ids then repeat exactly for the same input and time).
std::string warc_record_id(uint64_t hi, uint64_t lo);
// The current UTC time as WARC-Date wants it (seconds resolution).
std::string warc_date_now();

struct WarcRecord {
  std::vector<std::pair<std::string, std::string>> fields;  // as read, in order
  std::string block;
  uint64_t offset = 0;  // of the record in the uncompressed stream
  // A field's value by case-insensitive name ("" when absent).
  std::string field(std::string_view name) const;
};

class WarcReader {
 public:
  // Throws Error(Io) when it cannot be opened; a record over max_block bytes is a Format error.
  explicit WarcReader(std::string path, uint64_t max_block = uint64_t{1} << 30);
  ~WarcReader();
  WarcReader(const WarcReader&) = delete;
  WarcReader& operator=(const WarcReader&) = delete;
  bool next(WarcRecord& record);
  const std::string& path() const { return path_; }

 private:
  bool fill(size_t want);  // makes buffer_ hold `want` bytes from pos_ if the input has them
  struct Inflate;
  std::string path_;
  FILE* file_ = nullptr;
  std::unique_ptr<Inflate> inflate_;  // null for a plain file
  std::string buffer_;
  size_t pos_ = 0;
  uint64_t consumed_ = 0;  // uncompressed bytes before buffer_[0]
  uint64_t max_block_;
  bool eof_ = false;
};

// An HTTP response as a WARC "response" record holds it: status line, header
// lines, empty line, body. The body is un-chunked and decompressed (gzip,
// deflate, zstd) when the headers say it was sent so.
struct HttpResponse {
  int status = 0;
  std::string content_type;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};
// False (with `error` set) when the block is not an HTTP response or its body cannot be
// decoded or decompresses to more than max_body bytes.
bool parse_http_response(std::string_view block, HttpResponse& out, std::string& error,
                         uint64_t max_body = uint64_t{1} << 30);

}  // namespace zlm::formats
