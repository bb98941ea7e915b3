"""``/tokenflex/ui`` and ``GET /tokenflex/plans`` (issue 27, item 3): the caller's own
recent plans, drawn by a real headless Chromium (Debian's ``chromium``) after real
requests through the proxy to a loopback upstream.

The DOM Chromium builds (``--dump-dom``, after the page's own fetch) is checked against
the plans' ids and ``x-tokenflex-*`` headers the proxy answered with; the screenshot is
kept in the test's tmp directory.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_server import ServerThread
from test_server_metrics import KEY, Upstream, conversation, discover

from tokenflex.server import ServerConfig, create_app

ALICE = {"x-tokenflex-key": KEY, "authorization": "Bearer sk-alice"}
BOB = {"x-tokenflex-key": KEY, "authorization": "Bearer sk-bob"}
CAROL = {"x-tokenflex-key": KEY, "x-api-key": "sk-carol"}  # an Anthropic client


@pytest.fixture(scope="module")
def proxy() -> Iterator[ServerThread]:
    fake = Upstream()
    with ServerThread(fake.app()) as upstream:
        config = ServerConfig.load(upstream=upstream.url, proxy_key=KEY, cut_note=False)
        with ServerThread(create_app(config, discover=discover)) as p:
            yield p


@pytest.fixture(scope="module")
def made(proxy: ServerThread) -> dict[str, list[httpx.Response]]:
    """Alice's three answers (two cut, one whole), Bob's and Carol's, oldest first."""
    url = f"{proxy.url}/v1/chat/completions"
    out: dict[str, list[httpx.Response]] = {"alice": [], "bob": [], "carol": []}
    with httpx.Client(timeout=60, trust_env=False) as client:
        for who, headers, seed, turns in [
            ("alice", ALICE, 31, 40),
            ("alice", ALICE, 32, 1),
            ("bob", BOB, 33, 40),
            ("alice", ALICE, 34, 30),
        ]:
            body = {"model": "tiny", "messages": conversation(seed, turns)}
            r = client.post(url, json=body, headers=headers)
            assert r.status_code == 200, r.text
            out[who].append(r)
        body = {"model": "tiny", "messages": conversation(35, 30), "max_tokens": 100}
        r = client.post(f"{proxy.url}/v1/messages", json=body, headers=CAROL)
        assert r.status_code == 200, r.text
        out["carol"].append(r)
    return out


def test_the_list_is_the_callers_own_newest_first(
    proxy: ServerThread, made: dict[str, list[httpx.Response]]
) -> None:
    with httpx.Client(timeout=30, trust_env=False) as client:
        alice = client.get(f"{proxy.url}/tokenflex/plans", headers=ALICE).json()
        bob = client.get(f"{proxy.url}/tokenflex/plans", headers=BOB).json()
        one = client.get(f"{proxy.url}/tokenflex/plans?limit=1", headers=ALICE).json()
        no_key = client.get(f"{proxy.url}/tokenflex/plans", headers={"authorization": "x"})
        bad = client.get(f"{proxy.url}/tokenflex/plans?limit=0", headers=ALICE)
    ids = [r.headers["x-tokenflex-plan-id"] for r in reversed(made["alice"])]
    assert [item["id"] for item in alice["data"]] == ids
    assert [item["id"] for item in bob["data"]] == [made["bob"][0].headers["x-tokenflex-plan-id"]]
    assert [item["id"] for item in one["data"]] == ids[:1]
    for item, answer in zip(alice["data"], reversed(made["alice"]), strict=True):
        assert item["plan"]["input_tokens"] == int(answer.headers["x-tokenflex-input-tokens"])
    assert no_key.status_code == 401
    assert bad.status_code == 400 and "limit" in bad.json()["error"]["message"]


def test_the_page_is_static_and_needs_nothing_from_elsewhere(proxy: ServerThread) -> None:
    r = httpx.get(f"{proxy.url}/tokenflex/ui", trust_env=False)  # no key: it holds no data
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert "://" not in r.text  # no CDN, no external script, font or style
    assert "/tokenflex/plans" in r.text


class Dom(HTMLParser):
    """What the test reads from Chromium's DOM: plan cards, their bar lines, table rows."""

    def __init__(self) -> None:
        super().__init__()
        self.plans: list[str] = []
        self.summaries: list[str] = []
        self.rows: dict[str, list[str]] = {}
        self.status = ""
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("data-plan-id"):
            self.plans.append(a["data-plan-id"] or "")
            self.rows[self.plans[-1]] = []
        elif tag == "div" and a.get("class") == "summary":
            self._in = "summary"
            self.summaries.append("")
        elif tag == "span" and a.get("id") == "status":
            self._in = "status"
        elif tag == "tr" and a.get("class") in ("kept", "dropped") and self.plans:
            self.rows[self.plans[-1]].append(a["class"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("div", "span"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "summary":
            self.summaries[-1] += data
        elif self._in == "status":
            self.status += data


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium (as root it needs --no-sandbox); its own profile per call."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip(
            "chromium is not installed: the page is tested in a real headless browser "
            "(Debian: apt-get install chromium; 'make test' installs it when run as root)"
        )
    return subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_chromium_shows_the_callers_plans_as_bars_and_tables(
    proxy: ServerThread, made: dict[str, list[httpx.Response]], tmp_path: Path
) -> None:
    # the fragment carries the credentials: browsers never send it to the server
    url = f"{proxy.url}/tokenflex/ui#key=sk-alice&proxy-key={KEY}"
    common = [f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=8000"]
    dumped = chromium(*common, "--dump-dom", url)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = Dom()
    dom.feed(dumped.stdout)

    answers = list(reversed(made["alice"]))  # newest first, as the page lists them
    assert dom.plans == [r.headers["x-tokenflex-plan-id"] for r in answers]
    assert made["bob"][0].headers["x-tokenflex-plan-id"] not in dumped.stdout
    assert dom.status.startswith("3 plans")
    for plan_id, line, answer in zip(dom.plans, dom.summaries, answers, strict=True):
        h = answer.headers
        # the CLI's bar line, from the plan the page fetched
        assert line.startswith(
            f"tiny: {int(h['x-tokenflex-input-tokens']):,} input + "
            f"{int(h['x-tokenflex-max-tokens']):,} output + "
        ), line
        assert f" margin of {int(h['x-tokenflex-context-window']):,} (" in line, line
        kinds: list[Any] = dom.rows[plan_id]
        assert "kept" in kinds
        assert ("dropped" in kinds) == (int(h["x-tokenflex-dropped"]) > 0)

    # an Anthropic client's key goes as x-api-key
    carol = chromium(
        *common, "--dump-dom", f"{proxy.url}/tokenflex/ui#x-api-key=sk-carol&proxy-key={KEY}"
    )
    dom = Dom()
    dom.feed(carol.stdout)
    assert dom.plans == [made["carol"][0].headers["x-tokenflex-plan-id"]]

    shot = tmp_path / "ui.png"
    taken = chromium(
        *common, "--hide-scrollbars", "--window-size=1100,900", f"--screenshot={shot}", url
    )
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
