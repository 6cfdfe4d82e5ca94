"""Writes the benchmark's pages as a WARC of HTTP responses (warcio), the input of
download_urls --from-warc: each page under its ground-truth URL, text/html; charset=utf-8.

  make_warc.py BENCHMARK_DIR OUT.warc.gz [--repeat N]
"""
import gzip, io, json, os, sys
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter


def pages(bench):
    truth = json.load(open(os.path.join(bench, "ground-truth.json"), encoding="utf-8"))
    for key in sorted(truth):
        with gzip.open(os.path.join(bench, "html", key + ".html.gz"), "rb") as f:
            yield key, truth[key]["url"], f.read()


def main():
    bench, out = sys.argv[1], sys.argv[2]
    repeat = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--repeat" else 1
    with open(out, "wb") as f:
        writer = WARCWriter(f, gzip=True)
        for r in range(repeat):
            for key, url, html in pages(bench):
                headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html; charset=utf-8"),
                                                      ("Content-Length", str(len(html)))], protocol="HTTP/1.1")
                target = url if r == 0 else url + "#%d" % r
                writer.write_record(writer.create_warc_record(target, "response", payload=io.BytesIO(html),
                                                              http_headers=headers))


if __name__ == "__main__":
    main()
