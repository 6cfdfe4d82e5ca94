#!/usr/bin/env python3
"""The recipe's download step as OpenWebText's download.py does it: a multiprocessing pool,
each URL fetched with requests and its text taken by newspaper3k (Article.download with the
fetched HTML, parse, .text), one {"text", "url"} line per page with text, in input order.

  baseline_download.py URL_FILE OUT.jsonl --n_procs N [--timeout SEC]
"""
import argparse, json, multiprocessing, sys

import requests
from newspaper import Article

TIMEOUT = 30


def fetch(url):
    try:
        r = requests.get(url, timeout=TIMEOUT)
        if r.status_code != 200:
            return url, ""
        a = Article(url, fetch_images=False)
        a.download(input_html=r.text)
        a.parse()
        return url, a.text
    except Exception:  # download.py counts a failure and goes on
        return url, ""


def main():
    global TIMEOUT
    ap = argparse.ArgumentParser()
    ap.add_argument("url_file")
    ap.add_argument("output")
    ap.add_argument("--n_procs", type=int, default=10)
    ap.add_argument("--timeout", type=int, default=30)
    a = ap.parse_args()
    TIMEOUT = a.timeout
    urls = [u.strip() for u in open(a.url_file) if u.strip()]
    with multiprocessing.Pool(a.n_procs) as pool, open(a.output, "w", encoding="utf-8") as out:
        for url, text in pool.imap(fetch, urls, chunksize=4):
            if text:
                out.write(json.dumps({"text": text, "url": url}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    sys.exit(main())
