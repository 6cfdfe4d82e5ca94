#!/usr/bin/env python3
"""A loopback HTTP(S) server with the pages and faults download_urls must handle.

  server.py --port-file F [--tls CERT KEY] [--ipv6] [--docs JSONL] [--pages DIR]

Binds 127.0.0.1 (or ::1 with --ipv6) on a free port, writes the port to F and serves
until killed. With --docs, /doc/N is the N-th document's "text" (0-based) as an article page
between a menu and a footer, a <p> per line, and /dup/N the same with its first " the " as " THE " (a planted near-duplicate).
With --pages (the article-extraction benchmark's html/ folder), /bench/N is its
N-th page (names sorted, N modulo the count), as stored. /stats returns the counters (requests, the most requests and connections
open at once) as JSON; /reset-stats clears them. Nothing leaves the loopback interface.
"""
import argparse, gzip, html as htmllib, json, socket, ssl, struct, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATS = {"requests": 0, "active": 0, "max_active": 0, "connections": 0, "max_connections": 0}
TRIES = {}
DOCS = []
PAGES = []


def article(n):
    paras = [f"Paragraph {k} of article {n}, which tells, at some length, the story of item {n}: "
             f"a sentence long enough to be a real paragraph, with commas, words and numbers {n * 7 + k}."
             for k in range(4)]
    body = "".join(f"<p>{p}</p>\n" for p in paras)
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>Article %d</title></head><body>"
            "<nav><a href='/'>Home</a> <a href='/x'>News</a></nav>"
            "<div class='content'><h1>Article %d</h1>%s</div>"
            "<footer>Copyright, all rights reserved</footer></body></html>" % (n, n, body))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else headers and body in two writes wait on delayed ACKs (40 ms)

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        with LOCK:
            STATS["connections"] += 1
            STATS["max_connections"] = max(STATS["max_connections"], STATS["connections"])

    def finish(self):
        try:
            super().finish()
        finally:
            with LOCK:
                STATS["connections"] -= 1

    def send(self, status, body, ctype="text/html; charset=utf-8", headers=()):
        if isinstance(body, str):
            body = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def tries(self, key):
        with LOCK:
            TRIES[key] = TRIES.get(key, 0) + 1
            return TRIES[key]

    def do_GET(self):
        with LOCK:
            STATS["requests"] += 1
            STATS["active"] += 1
            STATS["max_active"] = max(STATS["max_active"], STATS["active"])
        try:
            self.route()
        finally:
            with LOCK:
                STATS["active"] -= 1

    def route(self):
        p = self.path
        if p == "/stats":
            with LOCK:
                return self.send(200, json.dumps(STATS), "application/json")
        if p == "/reset-stats":
            with LOCK:
                for k in ("requests", "max_active", "max_connections"):
                    STATS[k] = 0
                TRIES.clear()
            return self.send(200, "ok", "text/plain")
        if p.startswith("/page/"):
            n = int(p.split("/")[2])
            time.sleep((n * 37 % 11) / 1000.0)  # completion order differs from input order
            return self.send(200, article(n))
        if p.startswith("/doc/") or p.startswith("/dup/"):
            text = DOCS[int(p.split("/")[2])]
            if p.startswith("/dup/"):
                text = text.replace(" the ", " THE ", 1)
            paras = "".join("<p>%s</p>\n" % htmllib.escape(line) for line in text.split("\n") if line.strip())
            return self.send(200, "<!DOCTYPE html><html><head><title>Doc</title></head><body>"
                                  "<nav><a href='/'>Home</a> <a href='/about'>About us</a></nav>"
                                  "<article>%s</article><footer>All rights reserved.</footer></body></html>" % paras)
        if p.startswith("/bench/"):
            return self.send(200, PAGES[int(p.split("/")[2]) % len(PAGES)])
        if p.startswith("/busy/"):  # many URLs on one host: hold each request a little
            time.sleep(0.002)
            return self.send(200, article(int(p.split("/")[2])))
        if p == "/slow":
            time.sleep(30)
            return self.send(200, article(1))
        if p == "/stall":
            body = article(2).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:100])
            self.wfile.flush()
            time.sleep(30)
            return
        if p == "/404":
            return self.send(404, "<html><body><p>not found here at all, sorry about that</p></body></html>")
        if p.startswith("/flaky/"):  # 500 on the first try, then the page
            if self.tries(p) == 1:
                return self.send(500, "<html><body>oops</body></html>")
            return self.send(200, article(3))
        if p.startswith("/ratelimit/"):  # 429 with Retry-After: 1, then the page
            if self.tries(p) == 1:
                return self.send(429, "slow down", "text/plain", [("Retry-After", "1")])
            return self.send(200, article(4))
        if p == "/always500":
            return self.send(503, "<html><body>down</body></html>")
        if p == "/loop":
            return self.send(302, "", headers=[("Location", "/loop2")])
        if p == "/loop2":
            return self.send(302, "", headers=[("Location", "/loop")])
        if p == "/redirect":
            return self.send(301, "", headers=[("Location", "/page/5")])
        if p == "/to-file":
            return self.send(302, "", headers=[("Location", "file:///etc/passwd")])
        if p == "/big":
            return self.send(200, "<html><body><p>" + "x" * (3 << 20) + "</p></body></html>")
        if p == "/bomb":  # 100 MiB of zeros in 100 KB of gzip
            body = BOMB
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if p == "/gzip":
            body = gzip.compress(article(6).encode())
            return self.send(200, body, headers=[("Content-Encoding", "gzip")])
        if p in ("/zstd", "/br"):  # bodies in the newer content codings libcurl decodes
            if p == "/zstd":
                import zstandard
                body = zstandard.ZstdCompressor().compress(article(12).encode())
            else:
                import brotli
                body = brotli.compress(article(13).encode())
            return self.send(200, body, headers=[("Content-Encoding", p[1:])])
        if p == "/wrong-charset":  # says UTF-8, is windows-1252
            html = ("<html><body><p>Un caf\u00e9 cr\u00e8me \u00e0 la terrasse, na\u00efve fa\u00e7ade, "
                    "\u00e9t\u00e9 comme hiver, d\u00e9j\u00e0 vu \u2014 le r\u00e9sum\u00e9 est l\u00e0.</p></body></html>")
            return self.send(200, html.encode("cp1252"), "text/html; charset=utf-8")
        if p == "/meta-charset":  # no header charset; <meta> says windows-1251
            html = ("<html><head><meta http-equiv='Content-Type' content='text/html; charset=windows-1251'></head>"
                    "<body><p>\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u042d\u0442\u043e "
                    "\u0441\u0442\u0440\u0430\u043d\u0438\u0446\u0430 \u043d\u0430 \u0440\u0443\u0441\u0441\u043a\u043e\u043c.</p></body></html>")
            return self.send(200, html.encode("cp1251"), "text/html")
        if p == "/invalid-utf8":
            body = ("<html><body><p>Valid \u00e9t\u00e9 text, then a bad byte: ".encode() + b"\xff\xfe" +
                    " and more valid text \u00fcber alles.</p></body></html>".encode())
            return self.send(200, body, "text/html; charset=utf-8")
        if p == "/set-cookie":
            return self.send(200, article(10), headers=[("Set-Cookie", "session=SECRET123; Path=/")])
        if p == "/echo-cookie":
            return self.send(200, "<html><body><p>The cookie header this server saw on this request was: [%s], "
                                  "and that is all this page has to say.</p></body></html>"
                             % htmllib.escape(self.headers.get("Cookie", "none")))
        if p == "/bad-ctype":  # a Content-Type that is not UTF-8
            body = article(11).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; name=caf\u00e9")  # sent as Latin-1: byte E9
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if p == "/binary":
            return self.send(200, bytes(range(256)) * 64, "text/html")
        if p == "/pdf":
            return self.send(200, b"%PDF-1.4 binary", "application/pdf")
        if p == "/plain":
            return self.send(200, "Just plain text.\nSecond line of it.\n", "text/plain; charset=utf-8")
        if p == "/empty":
            return self.send(200, "<html><head><title>t</title></head><body><nav><a href='/'>x</a></nav></body></html>")
        if p == "/reset":  # headers promise a body; the connection is reset instead
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", "5000")
            self.end_headers()
            self.wfile.write(b"<html><body><p>partial")
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        return self.send(404, "no such test page", "text/plain")


BOMB = gzip.compress(b"\0" * (100 << 20), compresslevel=9)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        pass  # clients that give up (timeouts, caps) reset connections on purpose


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    ap.add_argument("--ipv6", action="store_true")
    ap.add_argument("--docs")
    ap.add_argument("--pages")
    a = ap.parse_args()
    if a.pages:
        import os
        for name in sorted(os.listdir(a.pages)):
            with gzip.open(os.path.join(a.pages, name), "rb") as f:
                PAGES.append(f.read())
    if a.docs:
        DOCS.extend(json.loads(line)["text"] for line in open(a.docs, encoding="utf-8"))
    if a.ipv6:
        Server.address_family = socket.AF_INET6
    srv = Server(("::1" if a.ipv6 else "127.0.0.1", 0), Handler)
    if a.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls[0], a.tls[1])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
