"""`/docs` works without the network: no script or stylesheet from a CDN, every operation listed, and the
way to the OpenAPI description (/openapi.json) said."""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 for its test client; httpx works
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from allocator.auth import parse_tokens
from allocator.service import create_app
from allocator.store import Store
from tests.allocator.helpers import TOKENS, small_pool


def test_the_docs_page_needs_no_network_and_says_where_the_openapi_description_is(tmp_path: Path) -> None:
    store = Store(tmp_path / "allocator.db", small_pool())
    try:
        client = TestClient(create_app(store, parse_tokens(json.dumps(TOKENS), "test tokens"), tick_interval_s=None))
        page = client.get("/docs")
        description = client.get("/openapi.json")
        redoc = client.get("/redoc")
    finally:
        store.close()
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert not re.search(r"<script|<link|src=|https?://(?!HOST)", page.text)  # nothing fetched from elsewhere
    assert 'href="/openapi.json"' in page.text
    assert "<td>POST</td><td><code>/v1/jobs</code></td>" in page.text and "<code>/healthz</code>" in page.text
    assert description.status_code == 200 and "/docs" not in description.json()["paths"]
    assert redoc.status_code == 404  # ReDoc's page loads from a CDN too: not served
