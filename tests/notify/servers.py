"""Real servers on 127.0.0.1 for the reminders' tests: an SMTP server (aiosmtpd, as the review packs'
delivery tests use) keeping what it accepts, and an HTTP server standing in for a chat webhook that
answers from a script (status, delay) and keeps every body."""
from __future__ import annotations

import email
import email.policy
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Inbox:
    """An aiosmtpd handler keeping every message it accepts; the first `refuse` messages are answered
    451 (try again later) at DATA."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], email.message.EmailMessage]] = []
        self.refuse = 0

    async def handle_DATA(self, server, session, envelope):
        if self.refuse:
            self.refuse -= 1
            return "451 4.3.0 mailbox busy, try again later"
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append((list(envelope.rcpt_tos), msg))
        return "250 Message accepted"


@contextmanager
def smtp_server() -> Iterator[tuple[int, Inbox]]:
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, inbox
    finally:
        controller.stop()


@dataclass
class Webhook:
    """What the chat webhook received and how it answers next: `script` is consumed one (status, delay_s)
    per request, then `status` with no delay."""

    url: str = ""
    bodies: list[dict] = field(default_factory=list)
    script: list[tuple[int, float]] = field(default_factory=list)
    status: int = 200
    answer: dict = field(default_factory=lambda: {"ok": True})
    requests: int = 0


@contextmanager
def webhook_server() -> Iterator[Webhook]:
    hook = Webhook()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                hook.requests += 1
                status, delay = hook.script.pop(0) if hook.script else (hook.status, 0.0)
            time.sleep(delay)
            if status == 200:
                with lock:
                    hook.bodies.append(body)
            answer = json.dumps(hook.answer if status == 200 else {"error": "boom"}).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
            except OSError:
                pass  # the client gave up (its timeout)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/T000/B000/secret-token"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
