"""Monthly review packs: every pack built (ops.review_packs, newest first), with its PDF and HTML
to open or download. Packs are pool-level documents for management: operators only."""
import streamlit as st

from dashboards import data, ui
from dashboards.i18n import t


def draw() -> None:
    user = ui.page_user()
    ui.title("page_packs")
    if not user.is_operator:
        st.info(t("packs_operators_only"))
        return
    packs = data.review_packs()
    if packs.is_empty():
        st.info(t("no_packs"))
        return
    home = data.home()
    for i, pack in enumerate(packs.iter_rows(named=True)):
        month = f"{pack['month']:%Y-%m}"
        with st.container(border=True):
            cols = st.columns([3, 2, 2, 2])
            cols[0].markdown(f"**{month}** · {pack['lang']} · {pack['version']}")
            cols[0].caption(f"{pack['built_at']:%Y-%m-%dT%H:%M:%S} UTC · catalog {pack['catalog_version']}")
            for col, kind, mime in ((cols[1], "pdf", "application/pdf"), (cols[2], "html", "text/html")):
                path = home / pack[f"{kind}_path"]
                if path.exists():
                    col.download_button(kind.upper(), path.read_bytes(), file_name=f"pack-{month}.{kind}",
                                        mime=mime, key=f"{kind}-{i}")
            cols[3].code(str(home / pack["pdf_path"]), language=None)


ui.guarded(draw)
