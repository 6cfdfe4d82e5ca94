#!/usr/bin/env python3
"""download_urls' main-text extraction on the ScrapingHub article-extraction benchmark:
the 181 pages as a WARC (warcio), extracted by download_urls --from-warc, scored with the
benchmark's own method (scoring.py). Fails below the F1 the README states.

  extraction_quality.py BIN_DIR BENCHMARK_DIR
"""
import json, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_warc  # noqa: E402
import scoring  # noqa: E402

CLAIMED_F1 = 0.964  # README and docs/benchmarks.md: "F1 0.964"


def main():
    bin_dir, bench = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as w:
        warc = os.path.join(w, "bench.warc.gz")
        sys.argv = ["make_warc", bench, warc]
        make_warc.main()
        out = os.path.join(w, "raw.json")
        subprocess.run([os.path.join(bin_dir, "download_urls"), "--from-warc", warc, "--output", out,
                        "--threads", "1", "-q", "--no-progress"], check=True)
        truth = json.load(open(os.path.join(bench, "ground-truth.json"), encoding="utf-8"))
        by_url = {v["url"]: k for k, v in truth.items()}
        predicted = {}
        for line in open(out, encoding="utf-8"):
            d = json.loads(line)
            predicted[by_url[d["url"]]] = d["text"]
        gold = {k: v["articleBody"] for k, v in truth.items()}
        p, r, f1 = scoring.score(gold, predicted)
        print("download_urls on %d pages: precision %.3f recall %.3f F1 %.3f (%d pages with text)"
              % (len(gold), p, r, f1, len(predicted)))
        if round(f1, 3) < CLAIMED_F1:
            print("FAIL: F1 %.4f below the stated %.3f" % (f1, CLAIMED_F1))
            sys.exit(1)


if __name__ == "__main__":
    main()
