"""Monthly review packs (ops.review_packs, newest first), with their PDF and HTML to save.
Operators see every pack, the pool's and each tenant's; a tenant member sees only their own tenant's
packs (data.review_packs filters them in the query): the pool's pack stays with the operators.
A pack's file is read only when its button is pressed, from the row this session's scoped query
returned, and handed over inside the session (dashboards/downloads.py): never at a /media/ URL."""
from pathlib import Path

import streamlit as st

from dashboards import data, downloads, ui
from dashboards.auth import tenant_scope
from dashboards.i18n import t

MIMES = {"pdf": "application/pdf", "html": "text/html"}


def _pack_file(home: Path, relative: str) -> Path | None:
    """The pack's file, when it exists inside the home (a row naming a file elsewhere names nothing)."""
    path = (home / relative).resolve()
    return path if path.is_relative_to(home.resolve()) and path.is_file() else None


def draw() -> None:
    user = ui.page_user()
    ui.title("page_packs")
    scope = tenant_scope(user)
    packs = data.review_packs(scope)
    if packs.is_empty():
        st.info(t("no_packs") if scope is None else t("no_tenant_packs", tenant=scope))
        return
    home = data.home()
    for i, pack in enumerate(packs.iter_rows(named=True)):
        month = f"{pack['month']:%Y-%m}"
        whose = pack["tenant"] or t("pack_pool")
        with st.container(border=True):
            cols = st.columns([3, 2, 2, 2])
            cols[0].markdown(f"**{month}** · {whose} · {pack['lang']} · {pack['version']}")
            cols[0].caption(f"{pack['built_at']:%Y-%m-%dT%H:%M:%S} UTC · catalog {pack['catalog_version']}")
            stem = f"pack-{month}" + (f"-{pack['tenant']}" if pack["tenant"] else "")
            asked: tuple[str, Path] | None = None
            for col, kind in ((cols[1], "pdf"), (cols[2], "html")):
                path = _pack_file(home, pack[f"{kind}_path"])
                if path is not None and col.button(kind.upper(), key=f"{kind}-{i}", icon=":material/download:"):
                    asked = kind, path
            if scope is None:  # the file's place on the server is the operators' business
                cols[3].code(str(home / pack["pdf_path"]), language=None)
            if asked is not None:
                kind, path = asked
                name = f"{stem}.{kind}"
                try:
                    downloads.save_in_browser(path.read_bytes(), name, MIMES[kind], t("pack_saving", name=name))
                except downloads.TooLargeToSend as exc:
                    st.error(f"{exc}. {t('pack_too_large')}")


ui.guarded(draw)
