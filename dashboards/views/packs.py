"""Monthly review packs: every pack kept under <home>/packs (newest first), with its PDF and HTML
to open or download. Packs are pool-level documents for management: operators only."""
import streamlit as st

from dashboards import data, ui
from dashboards.i18n import t
from pipelines.pack.store import packs_dir, read_index


def draw() -> None:
    user = ui.page_user()
    ui.title("page_packs")
    if not user.is_operator:
        st.info(t("packs_operators_only"))
        return
    packs = list(reversed(read_index(data.home())))
    if not packs:
        st.info(t("no_packs"))
        return
    root = packs_dir(data.home())
    for i, pack in enumerate(packs):
        with st.container(border=True):
            cols = st.columns([3, 2, 2, 2])
            cols[0].markdown(f"**{pack['month']}** · {pack['lang']} · {pack['version']}")
            cols[0].caption(f"{pack['created_at']} · catalog {pack['catalog_version']}")
            for col, kind, mime in ((cols[1], "pdf", "application/pdf"), (cols[2], "html", "text/html")):
                path = root / pack[kind]
                if path.exists():
                    col.download_button(kind.upper(), path.read_bytes(), file_name=f"pack-{pack['month']}.{kind}",
                                        mime=mime, key=f"{kind}-{i}")
            cols[3].code(str(root / pack["pdf"]), language=None)


ui.guarded(draw)
