"""The monthly review pack: figures from the metric views (figures.py), HTML/PDF/PNG charts
(render.py), packs kept per month and version, indexed in ops.review_packs (store.py)."""
