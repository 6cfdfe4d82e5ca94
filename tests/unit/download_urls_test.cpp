// download_urls' parts: charset decoding, main-text extraction, WARC records, URL hosts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "common/core/error.h"
#include "common/core/utf8.h"
#include "formats/warc.h"
#include "tools/download_urls/charset.h"
#include "tools/download_urls/fetcher.h"
#include "tools/download_urls/html_text.h"

namespace zlm::web {
namespace {

TEST(Charset, HeaderAndMetaLabels) {
  EXPECT_EQ(charset_from_content_type("text/html; charset=ISO-8859-1"), "iso-8859-1");
  EXPECT_EQ(charset_from_content_type("text/html;charset=\"utf-8\""), "utf-8");
  EXPECT_EQ(charset_from_content_type("text/html"), "");
  EXPECT_EQ(charset_from_meta("<html><head><META CHARSET=Shift_JIS>"), "shift_jis");
  EXPECT_EQ(charset_from_meta("<meta http-equiv='Content-Type' content='text/html; charset=koi8-r'>"), "koi8-r");
  EXPECT_EQ(charset_from_meta(std::string(9000, ' ') + "<meta charset=koi8-r>"), "");  // past the scanned prefix
  EXPECT_EQ(canonical_charset("latin1"), "windows-1252");  // as browsers read it
  EXPECT_EQ(canonical_charset("US-ASCII"), "windows-1252");
  EXPECT_EQ(canonical_charset("gb2312"), "GBK");
  EXPECT_EQ(canonical_charset("no-such-charset"), "");
}

TEST(Charset, DecodesByTheRightSource) {
  // Header wins over <meta>; windows-1252's 0x80 is the euro sign.
  DecodedPage d = decode_page("<meta charset=koi8-r><p>\x80 5</p>", "text/html; charset=windows-1252", true);
  EXPECT_EQ(d.source, "header");
  EXPECT_NE(d.utf8.find("\xE2\x82\xAC 5"), std::string::npos);
  // <meta> when the header says nothing.
  d = decode_page("<meta charset=windows-1251><p>\xCF\xF0\xE8\xE2\xE5\xF2</p>", "text/html", true);
  EXPECT_EQ(d.source, "meta");
  EXPECT_NE(d.utf8.find("\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82"), std::string::npos);  // Привет
  // A BOM outranks the header.
  d = decode_page("\xEF\xBB\xBFh\xC3\xA9", "text/html; charset=windows-1252", true);
  EXPECT_EQ(d.source, "bom");
  EXPECT_EQ(d.utf8, "h\xC3\xA9");
  d = decode_page(std::string("\xFF\xFEh\0i\0", 6), "", true);
  EXPECT_EQ(d.utf8, "hi");
  // Valid UTF-8 without a label stays UTF-8.
  d = decode_page("<p>na\xC3\xAFve</p>", "", true);
  EXPECT_EQ(d.source, "utf-8");
  EXPECT_EQ(d.replaced, 0u);
}

TEST(Charset, InvalidBytesNeverReachTheOutput) {
  // Declared UTF-8, mostly UTF-8 with broken bytes: U+FFFD in their place.
  DecodedPage d = decode_page("\xC3\xA9t\xC3\xA9 \xFF ok \xC3\xBC", "text/html; charset=utf-8", true);
  EXPECT_EQ(d.charset, "UTF-8");
  EXPECT_EQ(d.replaced, 1u);
  EXPECT_TRUE(utf8_valid(d.utf8));
  EXPECT_NE(d.utf8.find("\xEF\xBF\xBD"), std::string::npos);
  // Declared UTF-8 but windows-1252 throughout: the detector's charset.
  std::string latin = "<html><body><p>";
  for (int i = 0; i < 20; ++i) latin += "Caf\xE9 cr\xE8me \xE0 la fa\xE7" "ade, d\xE9j\xE0 vu. ";
  latin += "</p></body></html>";
  d = decode_page(latin, "text/html; charset=utf-8", true);
  EXPECT_EQ(d.source, "detected");
  EXPECT_TRUE(utf8_valid(d.utf8));
  EXPECT_NE(d.utf8.find("Caf\xC3\xA9 cr\xC3\xA8me"), std::string::npos);
  // Anything at all decodes to valid UTF-8.
  std::string noise;
  for (int i = 0; i < 4096; ++i) noise.push_back(static_cast<char>((i * 7919) & 0xFF));
  for (const char* type : {"", "text/html; charset=utf-8", "text/html; charset=shift_jis", "text/html; charset=utf-16"})
    EXPECT_TRUE(utf8_valid(decode_page(noise, type, true).utf8)) << type;
}

TEST(HtmlText, KeepsTheArticleDropsBoilerplate) {
  const std::string page = R"(<!DOCTYPE html><html><head><title> The  title </title><style>p{}</style>
    <script>var x = "script text";</script></head><body>
    <nav><a href="/">Home</a><a href="/news">News</a></nav>
    <div class="sidebar"><p>Sidebar text that is long enough to be a paragraph of its own, surely.</p></div>
    <div class="article-body">
      <p>First paragraph of the story, long enough to count, with commas, clauses, and more words.</p>
      <p>Second paragraph &amp; entities: caf&eacute;, a line<br>break, and   extra   spaces.</p>
      <p>Third paragraph, there to make the article longer than the 500 characters under which a page
         is extracted again with fewer rules (and the longest try is kept), which a real article is.</p>
      <p>Fourth paragraph, as long as the others, with a comma or two, and a full stop at its end.</p>
      <p>Fifth paragraph: the last one, which takes the article past five hundred characters at last.</p>
      <p style="display:none">Hidden text that no reader sees, and it must not be kept either.</p>
      <div class="share-buttons"><a href="#">Share</a> <a href="#">Tweet</a></div>
    </div>
    <div id="comments"><p>A comment from a reader, long enough to look like a paragraph, with commas.</p></div>
    <footer>Copyright 2026, all rights reserved, every one of them.</footer></body></html>)";
  const ExtractedPage out = extract_page(page);
  EXPECT_EQ(out.title, "The title");
  EXPECT_EQ(out.text,
            "First paragraph of the story, long enough to count, with commas, clauses, and more words.\n\n"
            "Second paragraph & entities: caf\xC3\xA9, a line\nbreak, and extra spaces.\n\n"
            "Third paragraph, there to make the article longer than the 500 characters under which a page is "
            "extracted again with fewer rules (and the longest try is kept), which a real article is.\n\n"
            "Fourth paragraph, as long as the others, with a comma or two, and a full stop at its end.\n\n"
            "Fifth paragraph: the last one, which takes the article past five hundred characters at last.");
}

TEST(HtmlText, SurvivesAnyInput) {
  EXPECT_EQ(extract_main_text(""), "");
  EXPECT_EQ(extract_main_text("<html><body></body></html>"), "");
  EXPECT_EQ(extract_main_text("plain words, no markup at all, but enough of them to be a paragraph."),
            "plain words, no markup at all, but enough of them to be a paragraph.");
  std::string deep;
  for (int i = 0; i < 5000; ++i) deep += "<div><br>";
  deep += "<p>Deep down, a paragraph long enough to be kept, with a comma, and a full stop.</p>";
  EXPECT_NE(extract_main_text(deep).find("Deep down"), std::string::npos);
  for (int i = 0; i < 100000; ++i) deep += "<div>";  // beyond kMaxOpenTags: refused at once
  EXPECT_TRUE(extract_page(deep).too_deep);
  for (int i = 0; i < 100000; ++i) deep += "</a>";  // stray close tags close nothing
  EXPECT_TRUE(extract_page(deep).too_deep);
  for (int i = 0; i < 100000; ++i) deep += "</div>";  // the peak counts, not the end
  const ExtractedPage refused = extract_page(deep);
  EXPECT_TRUE(refused.too_deep);
  EXPECT_EQ(refused.text, "");
  // Many elements a parser closes by itself, and tags inside scripts, are no depth.
  std::string flat = "<script>";
  for (int i = 0; i < 20000; ++i) flat += "<div>";
  flat += "</script>";
  for (int i = 0; i < 20000; ++i) flat += "<p>a paragraph<li>an item<a href=x>a link";
  EXPECT_FALSE(extract_page(flat).too_deep);
  std::string broken = "<p>unclosed <b>bold <i>italic <table><tr><td>cell</p></div></span>";
  EXPECT_NO_THROW(extract_main_text(broken));
}

TEST(HtmlText, RetriesWhenTheClassRulesRemoveTheArticle) {
  // The whole page sits in a wrapper whose class reads as boilerplate ("header-wrapper"):
  // the first pass finds nothing, the retry without class rules finds the text.
  std::string page = "<html><body><div class='header-wrapper'><div>";
  for (int i = 0; i < 8; ++i)
    page += "<p>Paragraph " + std::to_string(i) + " of a story, with commas, and enough words to count twice.</p>";
  page += "</div></div></body></html>";
  const std::string text = extract_main_text(page);
  EXPECT_NE(text.find("Paragraph 0 of a story"), std::string::npos);
  EXPECT_NE(text.find("Paragraph 7 of a story"), std::string::npos);
}

TEST(Warc, RecordsRoundTrip) {
  char path[] = "/tmp/zlm_warc_test_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  formats::WarcFields f;
  f.type = "response";
  f.target_uri = "http://example.com/a";
  f.date = "2026-11-26T00:00:00Z";
  f.record_id = formats::warc_record_id(1, 2);
  f.content_type = "application/http;msgtype=response";
  const std::string block = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<p>hi</p>";
  {
    std::ofstream out(path, std::ios::binary);
    out << formats::warc_record_gz(f, block);
    f.target_uri = "http://example.com/b";
    out << formats::warc_record_gz(f, block + "!");
  }
  formats::WarcReader reader(path);
  formats::WarcRecord r;
  ASSERT_TRUE(reader.next(r));
  EXPECT_EQ(r.field("warc-type"), "response");
  EXPECT_EQ(r.field("WARC-Target-URI"), "http://example.com/a");
  EXPECT_EQ(r.field("WARC-Record-ID"), "<urn:uuid:00000000-0000-4001-8000-000000000002>");
  EXPECT_EQ(r.block, block);
  ASSERT_TRUE(reader.next(r));
  EXPECT_EQ(r.block, block + "!");
  EXPECT_FALSE(reader.next(r));
  formats::HttpResponse http;
  std::string error;
  ASSERT_TRUE(formats::parse_http_response(r.block, http, error)) << error;
  EXPECT_EQ(http.status, 200);
  EXPECT_EQ(http.content_type, "text/html");
  EXPECT_EQ(http.body, "<p>hi</p>!");
  // A file cut inside a record: a Format error naming the file.
  {
    std::ifstream in(path, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << formats::warc_record(f, block).substr(0, 150);
  }
  formats::WarcReader cut(path);
  try {
    cut.next(r);
    FAIL() << "a cut record was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  std::remove(path);
}

TEST(Warc, HttpBodiesChunkedAndCompressed) {
  formats::HttpResponse http;
  std::string error;
  ASSERT_TRUE(formats::parse_http_response(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n", http, error));
  EXPECT_EQ(http.body, "Wikipedia");
  EXPECT_FALSE(formats::parse_http_response("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\nnot gzip", http, error));
  EXPECT_NE(error.find("gzip"), std::string::npos);
  EXPECT_FALSE(formats::parse_http_response("GET / HTTP/1.1\r\n\r\n", http, error));
  // A chunk size near 2^64 (an overflow once, an endless loop) ends the body.
  ASSERT_TRUE(formats::parse_http_response(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nA\r\nFFFFFFFFFFFFFFEC\r\nxyz", http, error));
  EXPECT_EQ(http.body, "Axyz");
  // A body over the cap once decompressed is refused, not inflated without end.
  std::string zeros(1 << 20, '\0');
  formats::WarcFields f;
  const std::string member = formats::warc_record_gz(f, zeros);  // a gzip member of 1 MiB and more
  EXPECT_FALSE(formats::parse_http_response("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n" + member, http,
                                            error, 4096));
  EXPECT_NE(error.find("over 4096 bytes"), std::string::npos) << error;
}

TEST(Fetcher, HostsAndTypes) {
  EXPECT_EQ(url_host("http://Example.COM/path"), "example.com");
  EXPECT_EQ(url_host("https://user:pw@host.org:8443/x?y"), "host.org");
  EXPECT_EQ(url_host("http://[::1]:8080/"), "[::1]");
  EXPECT_EQ(url_host("ftp://host/"), "");
  EXPECT_EQ(url_host("http:///nohost"), "");
  EXPECT_TRUE(accepted_content_type("text/html; charset=utf-8"));
  EXPECT_TRUE(accepted_content_type("application/xhtml+xml"));
  EXPECT_TRUE(accepted_content_type(""));
  EXPECT_FALSE(accepted_content_type("text/htmlx"));
  EXPECT_FALSE(accepted_content_type("image/png"));
}

}  // namespace
}  // namespace zlm::web
