"""`/docs`: the API's operations as one self-contained HTML page, and where the OpenAPI description is.

FastAPI's own page loads Swagger UI from a public CDN, which is blank on the air-gapped networks GPU
clusters often sit on, and no installed package ships Swagger UI's files; this page needs nothing
but the server.
"""

from __future__ import annotations

from html import escape

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import HTMLResponse

_METHODS = ("get", "post", "put", "patch", "delete")


def docs_page(openapi: dict, openapi_url: str) -> str:
    """The page for an OpenAPI description served at `openapi_url`: every operation's method, path and
    summary, and how to read the whole description."""
    info = openapi.get("info", {})
    rows = "\n".join(
        f"<tr><td>{escape(method.upper())}</td><td><code>{escape(path)}</code></td>"
        f"<td>{escape(_what(operation))}</td></tr>"
        for path, item in openapi.get("paths", {}).items()
        for method, operation in item.items() if method in _METHODS
    )
    url = escape(openapi_url)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(info.get('title', 'API'))}</title>
<style>body{{font-family:sans-serif;margin:2em}}td{{padding:.2em 1em .2em 0;vertical-align:top}}</style></head>
<body><h1>{escape(info.get('title', 'API'))} {escape(str(info.get('version', '')))}</h1>
<p>The OpenAPI description (every request and answer body) is at <a href="{url}"><code>{url}</code></a>.
Save it (<code>curl -o openapi.json http://HOST:PORT{url}</code>) and open it in any OpenAPI viewer
you have offline, or read it with <code>python -m json.tool openapi.json</code>.</p>
<table><tr><th>method</th><th>path</th><th>what it does</th></tr>
{rows}
</table></body></html>
"""


def _what(operation: dict) -> str:
    """The docstring's first line (FastAPI's description), else the summary it makes of the name."""
    return (operation.get("description") or "").strip().split("\n", 1)[0] or operation.get("summary", "")


def add_docs_page(app: FastAPI) -> None:
    """Serve `docs_page` at /docs (the app is created with docs_url=None and redoc_url=None)."""

    async def page(_request: Request) -> HTMLResponse:
        return HTMLResponse(docs_page(app.openapi(), app.openapi_url or "/openapi.json"))

    app.add_route("/docs", page, include_in_schema=False)
