#!/usr/bin/env python3
"""The Python main-text extractors on the article-extraction benchmark, one process, one core:
for each, the F1 of scoring.py and the pages per second of its extraction calls alone (the
HTML already in memory; one warm-up page first). Prints one JSON line per extractor.

  run_extractors.py BENCHMARK_DIR [--pages N] [--only NAME,...]
"""
import argparse, gzip, io, json, os, sys, time, warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scoring  # noqa: E402

warnings.filterwarnings("ignore")


def newspaper3k(html, url):
    from newspaper import Article
    a = Article(url, fetch_images=False)
    a.download(input_html=html)
    a.parse()
    return a.text


def trafilatura_(html, url):
    import trafilatura
    # include_comments=False: as the benchmark's authors ran it (their published 0.958)
    return trafilatura.extract(html, url=url, include_comments=False) or ""


def readability_lxml(html, url):
    import lxml.html
    from readability import Document
    root = lxml.html.fromstring(Document(html).summary())
    blocks = root.xpath("//p|//li|//h1|//h2|//h3|//h4|//h5|//h6|//pre|//blockquote|//td")
    return "\n\n".join(b.text_content().strip() for b in blocks if b.text_content().strip()) or root.text_content()


def justext_(html, url):
    import justext
    paras = justext.justext(html.encode("utf-8"), justext.get_stoplist("English"))
    return "\n\n".join(p.text for p in paras if not p.is_boilerplate)


EXTRACTORS = {"newspaper3k": newspaper3k, "trafilatura": trafilatura_, "readability-lxml": readability_lxml,
              "jusText": justext_}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("--pages", type=int, default=0)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    truth = json.load(open(os.path.join(a.bench, "ground-truth.json"), encoding="utf-8"))
    keys = sorted(truth)[: a.pages or None]
    pages = {}
    for k in keys:
        with gzip.open(os.path.join(a.bench, "html", k + ".html.gz"), "rb") as f:
            pages[k] = f.read().decode("utf-8", errors="replace")
    gold = {k: truth[k]["articleBody"] for k in keys}
    for name, fn in EXTRACTORS.items():
        if a.only and name not in a.only.split(","):
            continue
        fn(pages[keys[0]], truth[keys[0]]["url"])  # warm-up (imports, caches)
        predicted, t = {}, 0.0
        for k in keys:
            t0 = time.perf_counter()
            try:
                predicted[k] = fn(pages[k], truth[k]["url"])
            except Exception:
                predicted[k] = ""
            t += time.perf_counter() - t0
        p, r, f1 = scoring.score(gold, predicted)
        print(json.dumps({"extractor": name, "precision": round(p, 3), "recall": round(r, 3), "f1": round(f1, 3),
                          "pages_per_sec": round(len(keys) / t, 1), "pages": len(keys)}), flush=True)


if __name__ == "__main__":
    main()
