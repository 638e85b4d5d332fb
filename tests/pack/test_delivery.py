"""Delivery of the review packs by email, against a real SMTP server (aiosmtpd) started by the test: the
pool's pack to the pool's addresses, a tenant's pack to that tenant's only, the PDF attached byte for
byte; a retried run sends nothing again; a refusal fails with the server's reply and records nothing
for it; without the section nothing is sent. Also over STARTTLS with a login."""
from __future__ import annotations

import datetime as dt
import email
import email.policy
import json
import socket
import ssl
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from pipelines.assets.pack import review_pack
from pipelines.config import ConfigError
from pipelines.lake.reader import search_config
from pipelines.pack.build import build_pack
from pipelines.pack.deliver import PASSWORD_ENV, DeliveryConfig, DeliveryError, deliver, delivery_config
from pipelines.pack.tenant import tenants_of_month
from pipelines.resources.warehouse import WarehouseResource
from pipelines.warehouse import Warehouse
from tests.conftest import copy_home
from tests.pack.conftest import keep_only_tenants

pytestmark = pytest.mark.slow
MONTH = dt.date(2026, 11, 1)
POOL_TO = ["lead@example.org", "ops@example.org"]
REFUSED = "nobody@example.org"


class Inbox:
    """An aiosmtpd handler keeping every message it accepts; REFUSED is answered 550 at RCPT."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], email.message.EmailMessage]] = []

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address == REFUSED:
            return "550 5.1.1 mailbox unavailable"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append((list(envelope.rcpt_tos), msg))
        return "250 Message accepted"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp():
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=_free_port())
    controller.start()
    yield controller, inbox
    controller.stop()


@pytest.fixture(scope="module")
def packs(tmp_path_factory, packed_demo_home) -> tuple[Warehouse, list[Path], list[str]]:
    """A copy of the demo home with the month's pool pack (built once per test run: packed_demo_home)
    and two tenants' packs built; those two are the month's only tenants (the asset builds every
    tenant's pack)."""
    wh = Warehouse(copy_home(packed_demo_home, tmp_path_factory.mktemp("delivery") / "gpupool"))
    con = wh.connect(read_only=True)
    try:
        tenants = tenants_of_month(con, MONTH)[:2]
        (pool_pack,) = con.execute("select html_path from ops.review_packs where tenant is null").fetchone()
    finally:
        con.close()
    assert len(tenants) == 2
    keep_only_tenants(wh.home, *tenants)
    pool = (wh.home / pool_pack).parent
    return wh, [pool, *(build_pack(wh, MONTH, "en", tenant=t) for t in tenants)], tenants


@pytest.fixture
def wh(packs) -> Warehouse:
    """The packs' warehouse with no delivery recorded yet."""
    warehouse = packs[0]
    with warehouse.writer() as con:
        con.execute("delete from ops.pack_deliveries")
    return warehouse


def _config(port: int, tenants: list[str], **extra) -> DeliveryConfig:
    return DeliveryConfig.model_validate({
        "host": "127.0.0.1", "port": port, "security": "none", "from_address": "gpupool@example.org",
        "recipients": {"pool": POOL_TO, "tenants": {tenants[0]: ["a-lead@example.org"],
                                                   tenants[1]: ["b-lead@example.org", REFUSED]}},
        **extra})


def _recorded(wh: Warehouse) -> list[tuple]:
    with wh.writer() as con:
        return con.execute("select coalesce(tenant, 'pool'), recipient, version from ops.pack_deliveries "
                           "order by all").fetchall()


def test_each_pack_goes_to_its_own_recipients_with_its_pdf(wh, packs, smtp, pdf_not_rendered):
    """The packs mailed are the fixture's, rendered for real; the one rebuilt here is never mailed, so its
    PDF is not rendered (pdf_not_rendered)."""
    _, folders, tenants = packs
    controller, inbox = smtp
    cfg = _config(controller.port, tenants)
    cfg.recipients.tenants[tenants[1]].remove(REFUSED)
    sent = deliver(wh, folders, cfg)
    assert len(sent) == len(inbox.messages) == 4
    got = {tuple(rcpts): msg for rcpts, msg in inbox.messages}
    assert set(got) == {(POOL_TO[0],), (POOL_TO[1],), ("a-lead@example.org",), ("b-lead@example.org",)}
    expected = {POOL_TO[0]: (None, folders[0]), POOL_TO[1]: (None, folders[0]),
                "a-lead@example.org": (tenants[0], folders[1]), "b-lead@example.org": (tenants[1], folders[2])}
    for (rcpt,), msg in got.items():
        tenant, folder = expected[rcpt]
        assert msg["To"] == rcpt and msg["From"] == "gpupool@example.org"
        assert msg["Subject"] == "GPU pool review 2026-11" + (f": {tenant}" if tenant else "")
        text = msg.get_body(("plain",)).get_content()
        assert "2026-11" in text and folder.name in text
        answers = json.loads((folder / "figures.json").read_text()).get("answers") or []
        assert all(a["answer"] in text for a in answers) and (answers or "page 1" in text)
        (pdf,) = list(msg.iter_attachments())
        assert pdf.get_content_type() == "application/pdf"
        assert pdf.get_filename() == "gpupool-review-2026-11" + (f"-{tenant}" if tenant else "") + ".pdf"
        assert pdf.get_content() == (folder / "pack.pdf").read_bytes()
        # a tenant's pack never names another tenant
        for other in tenants:
            if other != tenant:
                assert other not in msg["Subject"] and other not in pdf.get_filename()
    assert [r[:2] for r in _recorded(wh)] == sorted(
        [("pool", POOL_TO[0]), ("pool", POOL_TO[1]), (tenants[0], "a-lead@example.org"),
         (tenants[1], "b-lead@example.org")])
    # a retried run, even with a pack rebuilt (a new version), mails nobody again
    rebuilt = [folders[0], build_pack(wh, MONTH, "en", tenant=tenants[0]), folders[2]]
    assert deliver(wh, rebuilt, cfg) == [] and len(inbox.messages) == 4


def test_a_refused_recipient_fails_the_run_with_the_servers_reply(wh, packs, smtp):
    _, folders, tenants = packs
    controller, inbox = smtp
    cfg = _config(controller.port, tenants)
    with pytest.raises(DeliveryError) as err:
        deliver(wh, folders, cfg)
    message = str(err.value)
    assert f"127.0.0.1:{controller.port}" in message and REFUSED in message and "550 5.1.1 mailbox unavailable" in message
    recorded = _recorded(wh)
    assert REFUSED not in {r[1] for r in recorded}
    assert {r[1] for r in recorded} == {rcpts[0] for rcpts, _ in inbox.messages}
    assert all((f / "pack.pdf").exists() for f in folders)  # the packs stay built
    # the retry sends only what was not sent, and fails again on the same refusal
    before = len(inbox.messages)
    with pytest.raises(DeliveryError, match="0 of 1 messages were sent"):
        deliver(wh, folders, cfg)
    assert len(inbox.messages) == before


def test_the_asset_builds_every_pack_and_mails_only_when_configured(wh, packs, smtp, tmp_path, monkeypatch,
                                                                   pdf_not_rendered):
    """Which packs are built and who is mailed are the point: the asset's six packs (two runs of three) are
    built with their PDFs not rendered (pdf_not_rendered)."""
    _, _, tenants = packs
    controller, inbox = smtp
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "absent.yml"))
    resources = {"warehouse": WarehouseResource(home=str(wh.home))}
    result = dg.materialize([review_pack], resources=resources, partition_key=MONTH.isoformat())
    meta = result.asset_materializations_for_node("review_pack")[0].metadata
    con = wh.analyst_connect()
    try:
        every = tenants_of_month(con, MONTH)
    finally:
        con.close()
    assert every == tenants and meta["packs_built"].value == 1 + len(every)
    assert meta["mails_sent"].value == 0 and meta["delivery"].value == "not configured"
    assert inbox.messages == []

    config = tmp_path / "gpupool.yml"
    config.write_text(f"pack_delivery:\n  host: 127.0.0.1\n  port: {controller.port}\n  security: none\n"
                      f"  from_address: gpupool@example.org\n  recipients:\n    pool: [{POOL_TO[0]}]\n"
                      f"    tenants:\n      {tenants[0]}: [a-lead@example.org]\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(config))
    result = dg.materialize([review_pack], resources=resources, partition_key=MONTH.isoformat())
    assert result.asset_materializations_for_node("review_pack")[0].metadata["mails_sent"].value == 2
    assert sorted(r[0] for r, _ in inbox.messages) == sorted([POOL_TO[0], "a-lead@example.org"])
    with duckdb.connect(str(wh.home / "warehouse.duckdb"), read_only=True, config=search_config(wh.home)) as con:  # published
        assert con.execute("select count(*) from ops.pack_deliveries").fetchone()[0] == 2


@pytest.mark.parametrize(("section", "says"), [
    ("host: h\n  from_address: a@b\n  security: tls", "security: Input should be 'starttls', 'ssl' or 'none'"),
    ("host: h\n  from_address: gpupool", "from_address: Value error, 'gpupool' is not an email address: write name@domain"),
    ("host: h\n  from_address: a@b\n  password: secret", f"password: remove it from the file; export {PASSWORD_ENV}"),
    ("host: h\n  from_address: a@b\n  username: u\n  security: none", "write starttls or ssl"),
    ("host: h\n  from_address: a@b\n  username: u", f"username is set but {PASSWORD_ENV} is not"),
    ("host: h\n  from_address: a@b\n  languages: [fr]", "languages.0: Input should be 'en' or 'zh'"),
    ("from_address: a@b", "host: Field required"),
])
def test_an_invalid_section_says_which_key_and_what_to_write(tmp_path, monkeypatch, section, says):
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    path = tmp_path / "gpupool.yml"
    path.write_text(f"pack_delivery:\n  {section}\n")
    with pytest.raises(ConfigError, match="section pack_delivery") as err:
        delivery_config(path)
    assert says in str(err.value)


def test_starttls_and_login(wh, packs, tmp_path, monkeypatch):
    """The client upgrades with STARTTLS (trusting the test's CA file) before it logs in."""
    cert, key = _self_signed(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    logins = []

    def authenticator(server, session, envelope, mechanism, auth_data):
        logins.append((auth_data.login, auth_data.password, session.ssl is not None))
        return AuthResult(success=auth_data.login == b"gpupool" and auth_data.password == b"s3cret")

    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=_free_port(), tls_context=server_tls,
                            require_starttls=True, authenticator=authenticator, auth_require_tls=True)
    controller.start()
    try:
        folders = packs[1]
        monkeypatch.setenv(PASSWORD_ENV, "s3cret")
        cfg = DeliveryConfig.model_validate({
            "host": "127.0.0.1", "port": controller.port, "security": "starttls", "username": "gpupool",
            "ca_file": str(cert), "from_address": "gpupool@example.org", "recipients": {"pool": [POOL_TO[0]]}})
        assert len(deliver(wh, folders, cfg)) == 1
    finally:
        controller.stop()
    assert logins == [(b"gpupool", b"s3cret", True)]
    assert [r for r, _ in inbox.messages] == [[POOL_TO[0]]]


def _self_signed(folder: Path) -> tuple[Path, Path]:
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "smtp.crt", folder / "smtp.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_one_failed_message_does_not_stop_later_deliveries(wh, packs, smtp, monkeypatch):
    """The pool's first address is refused and building the first tenant's message raises: every other
    message still goes out and is recorded, and the run then fails naming both failures."""
    from pipelines.pack import deliver as delivery

    _, folders, tenants = packs
    controller, inbox = smtp
    cfg = _config(controller.port, tenants)
    cfg.recipients.pool.insert(0, REFUSED)
    cfg.recipients.tenants[tenants[1]].remove(REFUSED)
    build = delivery.message

    def message(pack, sender, recipient):
        if pack.tenant == tenants[0]:
            raise ValueError("a header the mail library refuses")
        return build(pack, sender, recipient)

    monkeypatch.setattr(delivery, "message", message)
    with pytest.raises(DeliveryError) as err:
        deliver(wh, folders, cfg)
    said = str(err.value)
    assert f"to {REFUSED}: " in said and "550 5.1.1" in said
    assert "to a-lead@example.org: ValueError: a header the mail library refuses" in said
    assert "3 of 5 messages were sent" in said
    assert sorted(rcpts[0] for rcpts, _ in inbox.messages) == sorted([*POOL_TO, "b-lead@example.org"])
    assert {r[1] for r in _recorded(wh)} == {*POOL_TO, "b-lead@example.org"}
