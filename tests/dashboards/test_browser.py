"""The dashboards in a real browser: `streamlit run` started for real on a free port, Debian's Chromium
driven by Playwright (the system browser through executable_path, no browser download). Each page is
loaded by its URL, signed in through the form, checked for its key element and for no error, its charts
read from the drawn SVG as a reader would (a title, axis titles, at most eight colours in a legend), and
screenshotted; one page is also drawn in Chinese.

Screenshots are test artifacts under $GPUPOOL_ARTIFACTS/browser (default: the test's tmp_path).
With GPUPOOL_SCREENSHOTS=docs/screenshots they are also written there, named <page>.png: that is how
the README's screenshots are made, against a month's warehouse given by GPUPOOL_BROWSER_HOME
(default: the tests' 3-day, 64-GPU demo), see docs/dashboards.md.

Chromium missing: skipped here with the reason, a failure where GPUPOOL_REQUIRE_COMPONENTS is set (CI,
which installs it with scripts/components.sh).
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import os
import random
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from allocator.pool import default_pool
from allocator.sim.scaling import scale_pool
from allocator.telemetry import render_node_metrics
from pipelines.build import build
from pipelines.cli.dashboard import streamlit_command
from pipelines.connectors.scrape import DcgmConfig, Scraper, write_round
from pipelines.ingest import ingest_new_files
from pipelines.paths import REPO_ROOT
from pipelines.warehouse import Warehouse
from tests.components import require_component
from tests.conftest import copy_home
from tests.connectors.conftest import LoopbackServer, send
from tests.dashboards.conftest import APP, PASSWORD, USERS, add_tenant_pack

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("GPUPOOL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
DATAFRAME = '[data-testid="stDataFrame"]'
CHART = '[data-testid="stVegaLiteChart"]'
# url path -> the element that shows the page has its content
PAGES = {
    "pool": DATAFRAME,
    "queues": f"{CHART}, {DATAFRAME}",
    "tenants": f"{CHART}, {DATAFRAME}",
    "idle": f"{CHART}, {DATAFRAME}",
    "jobs": f"{CHART}, {DATAFRAME}",
    "health": f"{CHART}, {DATAFRAME}",
    "capacity": DATAFRAME,
    "quality": CHART,
    "audit": DATAFRAME,
    "catalog": DATAFRAME,
}
DEFAULT_PAGE = "pool"  # st.navigation serves its first page at the root URL, not at /pool
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
VIEWPORT = {"width": 1440, "height": 1400}
MAX_SERIES = 8  # dashboards.ui.MAX_SERIES: more colours than this cannot be told apart
SIGN_IN = {"en": ("User", "Password", "Sign in"), "zh": ("用户名", "密码", "登录")}
# what Vega drew for each chart (Streamlit renders SVG; a chart of over 2,000 points per datum gets a canvas,
# which has no text to read: counted apart). Legends with a colour gradient (heatmaps) are not series.
CHARTS_JS = """els => els.map(el => {
  const svg = el.querySelector('svg');
  if (!svg) return null;
  const texts = (sel, root) => [...(root || svg).querySelectorAll(sel + ' text')].map(x => x.textContent.trim());
  const legends = [...svg.querySelectorAll('.role-legend')].filter(l => !l.querySelector('.role-legend-gradient'));
  return {title: texts('.role-title-text').join(' '), axes: texts('.role-axis-title'),
          series: Math.max(0, ...legends.map(l => texts('.role-legend-label', l).length))};
})"""
# Vega creates a chart's empty <svg class="marks"> first and draws its marks (groups) into it when its
# dataflow has run; a canvas shows nothing to wait for (and nothing _charts_read can read). Charts in a
# tab not shown are not drawn until it is.
CHARTS_DRAWN_JS = """sel => [...document.querySelectorAll(sel)].filter(el => el.checkVisibility())
  .every(el => el.querySelector('svg.marks .mark-group, canvas'))"""
NEXT_FRAMES_JS = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def browser():
    require_component(f"Chromium ({CHROMIUM})", bool(Path(CHROMIUM).exists() or shutil.which(CHROMIUM)),
                      "`apt-get install chromium`, scripts/components.sh")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require_component("Python Playwright", False, "`pip install -e '.[dev]'`")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def context(browser):
    """The page tests' browser context: Streamlit's scripts load once into its cache. Each test's page is
    still a session of its own, signed in through the form: _open clears the session cookie first."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        yield context
    finally:
        context.close()


@contextmanager
def serve(home: str | Path, log: Path) -> Iterator[str]:
    """`streamlit run dashboards/app.py` on a free port against `home`, with the test users; its URL."""
    port = _free_port()
    env = dict(os.environ, GPUPOOL_HOME=str(home), GPUPOOL_DASHBOARD_USERS=json.dumps(USERS))
    with open(log, "w") as out:
        proc = subprocess.Popen(
            streamlit_command(APP, "127.0.0.1", port), cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not come up on {url}:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def app_url(request, tmp_path_factory):
    """The dashboards served against the demo warehouse (or GPUPOOL_BROWSER_HOME)."""
    home = os.environ.get("GPUPOOL_BROWSER_HOME") or str(request.getfixturevalue("demo_home"))
    with serve(home, tmp_path_factory.mktemp("streamlit") / "streamlit.log") as url:
        yield url


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> list[Path]:
    """Where screenshots go: the artifacts folder, and docs/screenshots-like folders when asked."""
    artifacts = os.environ.get("GPUPOOL_ARTIFACTS")
    folders = [Path(artifacts) / "browser" if artifacts else tmp_path_factory.mktemp("browser")]
    if os.environ.get("GPUPOOL_SCREENSHOTS"):
        folders.append(REPO_ROOT / os.environ["GPUPOOL_SCREENSHOTS"])
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    return folders


def _sign_in(page, name: str, lang: str = "en") -> None:
    user, password, button = SIGN_IN[lang]
    page.get_by_label(user).fill(name)
    page.get_by_label(password, exact=True).fill(PASSWORD)
    page.get_by_role("button", name=button).click()


def _charts_read(page, path: str) -> list[dict]:
    """Each drawn chart has a title and axis titles and at most MAX_SERIES colours; returns what was read."""
    drawn = page.locator(CHART).evaluate_all(CHARTS_JS)
    read = [c for c in drawn if c is not None]
    assert read or not drawn, f"{path}: no chart was drawn as SVG, none could be read"
    for chart in read:
        assert chart["title"], f"{path}: a chart without a title (axes {chart['axes']})"
        assert chart["axes"], f"{path}: chart {chart['title']!r} has no axis title"
        assert chart["series"] <= MAX_SERIES, f"{path}: chart {chart['title']!r} has {chart['series']} colours"
    return read


def _whole_page(page) -> None:
    """Streamlit scrolls inside its main block, so a full-page screenshot is one window high: make the
    window as tall as the content (up to 12,000 px) so that every chart is in the picture."""
    height = page.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": VIEWPORT["width"], "height": min(max(height, VIEWPORT["height"]), 12_000)})
    _charts_drawn(page)
    page.evaluate(NEXT_FRAMES_JS)  # the taller window laid out


def _open(context, url: str, path: str, lang: str = "en"):
    """A page signed in as the operator and drawn; JavaScript errors collected in the returned list."""
    context.clear_cookies()  # the form, not the session cookie of the page before
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.goto(url)
    page.wait_for_selector('[data-testid="stForm"]', timeout=30_000)
    _settled(page)  # widgets stay inert while the script runs
    _sign_in(page, "ops", lang)
    page.wait_for_selector(f'[data-testid="gpupool-page"][data-page="page_{path}"][data-lang="{lang}"]',
                           state="attached", timeout=60_000)
    page.wait_for_selector(PAGES[path], timeout=60_000)
    _settled(page)
    _charts_drawn(page)
    return page, problems


def _settled(page, timeout_ms: int = 30_000) -> None:
    """Wait until the script run is over (the app's root says so)."""
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=timeout_ms)


def _charts_drawn(page, timeout_ms: int = 30_000) -> None:
    """Wait until Vega, which renders after the script run, has drawn every chart on the page."""
    page.wait_for_function(CHARTS_DRAWN_JS, arg=CHART, timeout=timeout_ms)


def test_sign_in_form_guards_every_page(context, app_url):
    page = context.new_page()
    try:
        page.goto(f"{app_url}/audit")
        page.wait_for_selector('[data-testid="stForm"]', timeout=30_000)
        _settled(page)
        assert page.locator(DATAFRAME).count() == 0  # an anonymous visitor sees nothing but the form
        page.get_by_label("User").fill("ops")
        page.get_by_label("Password", exact=True).fill("wrong")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_selector('[data-testid="stAlertContentError"]', timeout=30_000)
        assert page.locator(DATAFRAME).count() == 0
    finally:
        page.close()


# headline tiles whose label or figure the browser cut (an ellipsis: the text is wider than its box)
CUT_TILES_JS = """els => els.flatMap(el => [...el.querySelectorAll(
    '[data-testid="stMetricLabel"] *, [data-testid="stMetricValue"] *, [data-testid="stMetricValue"]')]
  .filter(x => x.scrollWidth > x.clientWidth + 1).map(x => x.textContent.trim()))"""


def _cut_tiles(page) -> list[str]:
    return page.locator('[data-testid="stMetric"]').evaluate_all(CUT_TILES_JS)


def _signed_in_on(page, key: str) -> None:
    page.wait_for_selector(f'[data-testid="gpupool-page"][data-page="{key}"]', state="attached", timeout=60_000)
    _settled(page)
    assert page.locator('[data-testid="stForm"]').count() == 0


def test_a_reload_and_a_new_tab_keep_the_session(browser, app_url):
    """Signed in once, a reload and a new tab of the same browser are still signed in (the signed session
    cookie); after signing out, or with a tampered cookie, the sign-in form shows again."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.goto(f"{app_url}/audit")
        page.wait_for_selector('[data-testid="stForm"]', timeout=30_000)
        _settled(page)
        _sign_in(page, "ops")
        _signed_in_on(page, "page_audit")
        page.wait_for_function("() => document.cookie.includes('gpupool_session=')", timeout=30_000)
        cookie = next(c for c in context.cookies() if c["name"] == "gpupool_session")
        assert cookie["sameSite"] == "Strict" and cookie["expires"] > time.time() + 11 * 3600
        page.reload()
        _signed_in_on(page, "page_audit")
        other = context.new_page()
        other.goto(f"{app_url}/jobs")
        _signed_in_on(other, "page_jobs")
        other.close()
        # a tampered cookie (another user's name under the old signature) is refused
        payload, signature = cookie["value"].split(".")
        forged = base64.urlsafe_b64encode(base64.urlsafe_b64decode(payload + "==").replace(b'"ops"', b'"vic"'))
        context.add_cookies([{**cookie, "value": f"{forged.decode().rstrip('=')}.{signature}"}])
        page.reload()
        page.wait_for_selector('[data-testid="stForm"]', timeout=30_000)
        context.add_cookies([cookie])
        page.reload()
        _signed_in_on(page, "page_audit")
        page.get_by_role("button", name="Sign out").click()
        page.wait_for_selector('[data-testid="stForm"]', timeout=30_000)
        page.wait_for_function("() => !document.cookie.includes('gpupool_session=')", timeout=30_000)
        page.reload()
        page.wait_for_selector('[data-testid="stForm"]', timeout=30_000)
    finally:
        context.close()


@pytest.mark.parametrize("path", list(PAGES))
def test_page_in_the_browser(context, app_url, shots, path):
    began = time.monotonic()
    page, problems = _open(context, f"{app_url}/{'' if path == DEFAULT_PAGE else path}", path)
    try:
        seconds = time.monotonic() - began
        errors = [e.inner_text()[:500] for e in page.locator(ERRORS).all()]
        assert errors == [], f"{path}: {errors}"
        assert problems == [], f"{path}: JavaScript errors {problems}"
        assert _cut_tiles(page) == [], f"{path}: headline tiles cut"
        text = page.locator('[data-testid="stMain"]').inner_text()
        assert not re.search(r"\bNone\b|\bnan\b", text), f"{path}: 'None' or 'nan' on the page"
        charts = _charts_read(page, path)
        _whole_page(page)
        for folder in shots:
            page.screenshot(path=str(folder / f"{path}.png"), full_page=True)
        print(f"{path}: signed in and drawn in {seconds:.1f} s; charts: {[c['title'] for c in charts]}")
    except Exception:
        page.screenshot(path=str(shots[0] / f"{path}-failed.png"))
        raise
    finally:
        page.close()


def test_page_in_chinese(context, app_url, shots):
    """The tenants page (a heatmap, top-N bars, a facet-free mix) in Chinese: titles in Chinese, no error."""
    page, problems = _open(context, f"{app_url}/tenants?lang=zh", "tenants", "zh")
    try:
        assert [e.inner_text()[:500] for e in page.locator(ERRORS).all()] == []
        assert problems == [], f"JavaScript errors {problems}"
        titles = [c["title"] for c in _charts_read(page, "tenants")]
        assert any("配额" in title for title in titles), titles
        _whole_page(page)
        page.screenshot(path=str(shots[0] / "tenants-zh.png"), full_page=True)
    except Exception:
        page.screenshot(path=str(shots[0] / "tenants-zh-failed.png"))
        raise
    finally:
        page.close()


@pytest.mark.parametrize("path", ["pool", "queues", "idle", "jobs", "health", "quality", "audit"])
def test_tiles_fit_in_chinese(context, app_url, path):
    """The pages with headline tiles, in Chinese: no tile's label or figure cut, no 'None'."""
    page, problems = _open(context, f"{app_url}/{'' if path == DEFAULT_PAGE else path}?lang=zh", path, "zh")
    try:
        assert problems == [] and _cut_tiles(page) == [], f"{path}: {problems} {_cut_tiles(page)}"
        assert not re.search(r"\bNone\b|\bnan\b", page.locator('[data-testid="stMain"]').inner_text())
    finally:
        page.close()


PACK_MONTH = dt.date(2026, 11, 1)
PACK_BYTES = 3 * 2**20  # a pack PDF of a few MB, as the pool's are


@pytest.fixture(scope="module")
def packs_url(demo_home, tmp_path_factory):
    """The dashboards over a copy of the demo with two tenants' packs (PDFs of PACK_BYTES); their PDFs' bytes."""
    home = copy_home(demo_home, tmp_path_factory.mktemp("packs") / "gpupool")
    pdfs = {tenant: b"%PDF-1.7\n%" + tenant.encode() + random.Random(tenant).randbytes(PACK_BYTES)
            for tenant in ("vision", "nlp")}
    for tenant, pdf in pdfs.items():
        add_tenant_pack(home, PACK_MONTH, tenant, pdf, f"<p>{tenant} pack</p>".encode())
    with serve(home, tmp_path_factory.mktemp("streamlit") / "streamlit.log") as url:
        yield url, pdfs


def _served_without_a_session(urls: set[str], pdf: bytes) -> list[str]:
    """Those of `urls` that hand `pdf` to a client with no cookie and no session (plain `requests`)."""
    return [u for u in sorted(urls) if requests.get(u, timeout=30).content == pdf]


def test_pack_pdf_is_not_served_without_a_session(browser, packs_url, shots):
    """A tenant member saves their pack's exact PDF through the signed-in page; no URL the page used
    gives it to a client without the session, while the session lives nor after the browser closed;
    and no byte of another tenant's pack reaches their browser."""
    url, pdfs = packs_url
    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
    page = context.new_page()
    requested: list[str] = []
    received: list[bytes] = []
    problems: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    page.on("websocket", lambda ws: ws.on(
        "framereceived", lambda frame: received.append(frame if isinstance(frame, bytes) else frame.encode())))
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    try:
        page.goto(f"{url}/packs")
        page.wait_for_selector('[data-testid="stForm"]', timeout=30_000)
        _settled(page)
        _sign_in(page, "vic")
        page.wait_for_selector('[data-testid="gpupool-page"][data-page="page_packs"]', state="attached",
                               timeout=60_000)
        _settled(page)
        with page.expect_download(timeout=60_000) as download:
            page.get_by_role("button", name="PDF").click()
        saved = Path(download.value.path()).read_bytes()
        assert saved == pdfs["vision"], f"saved {len(saved)} bytes, not the pack's {len(pdfs['vision'])}"
        assert problems == [], f"JavaScript errors {problems}"
        links = set(page.evaluate("""() => [...document.querySelectorAll('[href], [src]')]
                                    .map(e => e.href || e.src)""")) | {download.value.url} | set(requested)
        offered = {u for u in links if u.startswith(url)} - {f"{url}/packs", f"{url}/"}
        assert _served_without_a_session(offered, pdfs["vision"]) == [], "served while the session lives"
        assert not [u for u in offered if u.startswith(f"{url}/media/")], "the pack was put at a /media/ URL"
        # the pack came over the session's WebSocket; the other tenant's did not
        sent = b"".join(received)
        assert base64.b64encode(pdfs["vision"][:3000]) in sent
        assert base64.b64encode(pdfs["nlp"][:3000]) not in sent and pdfs["nlp"][:3000] not in sent
        page.screenshot(path=str(shots[0] / "packs.png"))
    except Exception:
        page.screenshot(path=str(shots[0] / "packs-failed.png"))
        raise
    finally:
        page.close()
        context.close()
    assert _served_without_a_session(offered, pdfs["vision"]) == [], "served after the browser closed"


def _as_of_line(page) -> str:
    return page.locator('[data-testid="stSidebar"] [data-testid="stCaptionContainer"]').filter(
        has_text="Data as of").inner_text()


def test_a_round_scraped_while_the_pool_page_is_open_shows_after_one_cycle(context, demo_home, tmp_path, shots):
    """The live chain's promise, in the browser (issue 30): with the dashboards serving, a dcgm-exporter
    round of one node is scraped, and after one cycle (the intraday ingest adding that round to the day,
    the build, its publish, as the live chain runs them) the Pool page reads the new release: its "as of"
    line and the GPUs' caption give the round's minute. The server's query cache is keyed by release,
    not only by time."""
    home = copy_home(demo_home, tmp_path / "home")
    wh = Warehouse(home)
    with wh.connect(read_only=True) as con:
        end, release = con.execute("select max(last_telemetry_at), (select release_id from lake.release) "
                                   "from metrics.gpu_status").fetchone()
    pool = scale_pool(default_pool(), 64)  # the demo's pool (tests/conftest.py small_demo_home)
    first_at, round_at = end + dt.timedelta(minutes=2, seconds=7), end + dt.timedelta(minutes=3, seconds=7)
    assert first_at.date() == round_at.date(), "the two rounds must fall on one day"
    scraped_at = [first_at]
    exporter = LoopbackServer(lambda request: send(
        request, 200, render_node_metrics(pool, {}, pool.nodes[0].host, scraped_at[0]).encode()))

    def scrape_and_land() -> None:
        scraper = Scraper(DcgmConfig(targets=[f"{exporter.url}/metrics"], retries=0))
        try:
            scrape = scraper.scrape_round(scraped_at[0])
        finally:
            scraper.close()
        assert scrape.samples.height > 0 and scrape.records_quarantined == 0 and scrape.gaps.is_empty()
        write_round(wh.landing, scrape)

    try:
        scrape_and_land()  # the day's rounds so far, read by an earlier cycle
        assert ingest_new_files(wh, "dcgm_parquet", first_at.date()).how.startswith("whole day")
        release = wh.current_release()  # that ingest's (the models not built on it yet)
        with serve(home, tmp_path / "streamlit.log") as url:
            page, problems = _open(context, url, "pool")
            assert f"Data as of {end:%Y-%m-%d %H:%M} UTC · release {release}," in _as_of_line(page)
            scraped_at[0] = round_at
            scrape_and_land()
            assert ingest_new_files(wh, "dcgm_parquet", round_at.date()).how == "1 new file(s) added"
            build(wh)
            new_release = wh.current_release()
            assert new_release > release
            with wh.connect(read_only=True) as con:
                gpus_as_of = con.execute("select max(as_of_at) from metrics.gpu_status").fetchone()[0]
            assert gpus_as_of > round_at  # the data's end: the round's minute, and the minute it stands for
            page.close()
            page, problems_after = _open(context, url, "pool")  # within the cache's TTL of the first read
            minute = f"{round_at:%Y-%m-%d %H:%M}"
            assert f"Data as of {minute} UTC · release {new_release}," in _as_of_line(page)
            assert page.get_by_text(f"as of {gpus_as_of}").count() > 0  # the GPUs' caption (metrics.gpu_status)
            assert problems == problems_after == []
            page.screenshot(path=str(shots[0] / "pool-after-a-cycle.png"))
            page.close()
    finally:
        exporter.stop()
