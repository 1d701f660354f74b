"""Debian's chromium driven by Playwright, with every request recorded and nothing allowed off the machine."""
from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Nothing may leave the machine: chromium sends every request but the loopback's to a proxy that is not there,
# and resolves no host name but 127.0.0.1. (Routing each request through Playwright did the same from Python, at a
# round trip per request: a fifth of the browser tests' time.) The request event still records an attempt, so
# tests see it.
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--proxy-server=http://127.0.0.1:9",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


def is_local(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme in ("data", "blob", "file", "about") or parsed.hostname == "127.0.0.1"


class Browser:
    def __init__(self, page):
        self.page = page
        self.requests: list[str] = []
        self.failed: list[tuple[str, str]] = []
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("requestfailed", lambda r: self.failed.append((r.url, r.failure)))

    def remote_requests(self) -> list[str]:
        return [url for url in self.requests if not is_local(url)]

    def wait_for_math(self, minimum: int = 1) -> int:
        """Wait until MathJax has typeset the page; return the number of typeset formulas."""
        self.page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                                    timeout=30000)
        self.page.evaluate("() => MathJax.startup.promise")
        self.page.wait_for_selector("mjx-container", state="attached", timeout=30000)
        self.page.evaluate("() => document.fonts.ready")
        assert self.page.locator("mjx-merror").count() == 0, "MathJax reported a TeX error"
        count = self.page.locator("mjx-container").count()
        assert count >= minimum, f"only {count} formulas typeset"
        return count


@contextlib.contextmanager
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is needed for the browser tests: apt-get install chromium (.ci/run does it)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = instance.new_context(viewport={"width": 1200, "height": 1400})
        try:
            yield Browser(context.new_page())
        finally:
            instance.close()


@contextlib.contextmanager
def serve(folder: Path):
    """Serve `folder` on 127.0.0.1 at a free port; yield the base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)], cwd=folder,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()
