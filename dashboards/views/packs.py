"""Monthly review packs (ops.review_packs, newest first), with their PDF and HTML to open or download.
Operators see every pack, the pool's and each tenant's; a tenant member sees only their own tenant's
packs (data.review_packs filters them in the query): the pool's pack stays with the operators."""
import streamlit as st

from dashboards import data, ui
from dashboards.auth import tenant_scope
from dashboards.i18n import t


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
            for col, kind, mime in ((cols[1], "pdf", "application/pdf"), (cols[2], "html", "text/html")):
                path = home / pack[f"{kind}_path"]
                if path.exists():
                    col.download_button(kind.upper(), path.read_bytes(), file_name=f"{stem}.{kind}",
                                        mime=mime, key=f"{kind}-{i}")
            if scope is None:  # the file's place on the server is the operators' business
                cols[3].code(str(home / pack["pdf_path"]), language=None)


ui.guarded(draw)
