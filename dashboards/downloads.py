"""Files handed to a signed-in user through their own session, never at a URL.

`st.download_button` puts its bytes in Streamlit's media store, and the browser fetches them from
`/media/<id>`: a URL that any client may fetch with no session, from the page's render until the
store forgets the file, which is some runs after the session has ended (a closed tab's session is
kept two minutes for a reconnect). For a tenant's review pack that is an open door. Here the page
decides, in the signed-in session, that the user may have the file (as it decides what to list),
reads it, and sends its bytes inside that session's own WebSocket message: an iframe (`srcdoc`, no
URL) whose script makes a blob in the browser's memory and saves it. Nothing is stored on the server
and no URL exists to fetch, leak or replay; the blob is gone with the tab.

The bytes travel base64-encoded (a third more) in one message, so a file is refused over
MAX_DOWNLOAD_BYTES, well under Streamlit's `server.maxMessageSize` (200 MB).
"""
from __future__ import annotations

import base64
import html
import json

import streamlit as st

MAX_DOWNLOAD_BYTES = 64 * 1024 * 1024  # 85 MB once base64-encoded, under server.maxMessageSize
_FRAME_HEIGHT_PX = 40

# the file's base64 sits in a text <script> (its alphabet has no "<"); the script saves it once, on
# load (the user has just asked for it), and leaves a link to save it again while the frame lives
_PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
body {{ margin: 0; font: 14px/40px "Source Sans Pro", sans-serif; }} a {{ color: #ff4b4b; }}
</style></head><body>
<a id="save" data-testid="gpupool-save" href="#">{label}</a>
<script id="file" type="text/plain">{data}</script>
<script>
const text = atob(document.getElementById("file").textContent);
const bytes = new Uint8Array(text.length);
for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
const url = URL.createObjectURL(new Blob([bytes], {{type: {mime}}}));
const link = document.getElementById("save");
link.href = url;
link.download = {name};
addEventListener("pagehide", () => URL.revokeObjectURL(url));
link.click();
</script></body></html>"""


class TooLargeToSend(ValueError):
    """A file over MAX_DOWNLOAD_BYTES: it would not fit one WebSocket message."""


def _js_string(value: str) -> str:
    """A JavaScript string literal that cannot close the <script> it sits in."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e")


def save_in_browser(data: bytes, file_name: str, mime: str, label: str) -> None:
    """Send `data` to this session's browser, which saves it as `file_name` (and shows `label`, a link
    to save it again). Call it only in the run where the signed-in user asked for the file, after
    checking they may have it: the bytes are in that run's page and nowhere else."""
    if len(data) > MAX_DOWNLOAD_BYTES:
        raise TooLargeToSend(f"{file_name} is {len(data) / 2**20:.1f} MiB, over the "
                             f"{MAX_DOWNLOAD_BYTES / 2**20:.0f} MiB a dashboard sends")
    page = _PAGE.format(label=html.escape(label), data=base64.b64encode(data).decode("ascii"),
                        mime=_js_string(mime), name=_js_string(file_name))
    st.iframe(page, height=_FRAME_HEIGHT_PX)
