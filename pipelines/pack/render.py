"""The pack as HTML (Jinja2), PDF (WeasyPrint) and PNG charts (Altair -> vl-convert), plus the
CSV/Parquet appendix of every table."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import altair as alt
import jinja2
import vl_convert as vlc

from pipelines.pack.figures import Figures, change

TEXT = {
    "title": {"en": "GPU pool monthly review", "zh": "GPU资源池月度报告"},
    "catalog": {"en": "Metric catalog version", "zh": "指标目录版本"},
    "release": {"en": "Data release", "zh": "数据版本"},
    "metric": {"en": "Metric", "zh": "指标"}, "value": {"en": "Value", "zh": "数值"},
    "previous": {"en": "Previous month", "zh": "上月"}, "change": {"en": "Change", "zh": "变化"},
    "notes": {"en": "Definitions", "zh": "指标定义"}, "appendix": {"en": "Appendix", "zh": "附录"},
    "source": {"en": "Source", "zh": "来源"},
}

TEMPLATE = jinja2.Template("""<!doctype html><html lang="{{ lang }}"><head><meta charset="utf-8">
<title>{{ t.title }} {{ month }}</title><style>
@page { size: A4; margin: 14mm; @bottom-right { content: counter(page); font-size: 8pt; } }
body { font-family: "Noto Sans", "Noto Sans CJK SC", "DejaVu Sans", sans-serif; font-size: 9pt; color: #222; }
h1 { font-size: 16pt; margin: 0 } h2 { font-size: 12pt; border-bottom: 1px solid #888; margin-top: 14pt; }
h3 { font-size: 10pt; margin: 8pt 0 2pt } table { border-collapse: collapse; width: 100%; margin-bottom: 4pt }
td, th { border-bottom: 1px solid #ddd; padding: 1.5pt 4pt; text-align: left; font-size: 8pt }
td.n { text-align: right } .fn { font-size: 7pt; color: #555 } img { max-width: 100%; height: 150pt }
</style></head><body>
<h1>{{ t.title }} — {{ month }}</h1>
<p>{{ t.catalog }}: <b>{{ catalog_version }}</b> · {{ t.release }}: <b>{{ release_id }}</b> · {{ generated }}</p>
{% for part in parts %}<h2>{{ part_titles[part] }}</h2>
{% if headlines[part] %}<table><tr><th>{{ t.metric }}</th><th>{{ t.value }}</th><th>{{ t.previous }}</th><th>{{ t.change }}</th></tr>
{% for h in headlines[part] %}<tr><td>{{ h.label }}<sup>{{ h.note }}</sup></td><td class="n">{{ h.value }}</td>
<td class="n">{{ h.previous }}</td><td class="n">{{ h.change }}</td></tr>{% endfor %}</table>{% endif %}
{% for tb in tables[part] %}<h3>{{ tb.key }}</h3>
{% if tb.chart %}<img src="{{ tb.chart }}">{% endif %}
<table><tr>{% for c in tb.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in tb.rows %}<tr>{% for v in row %}<td{% if v is number %} class="n"{% endif %}>{{ fmt(v) }}</td>{% endfor %}</tr>{% endfor %}
</table><p class="fn">{{ t.source }}: metrics.{{ tb.view }}; {{ t.appendix }}: appendix/{{ tb.key }}.csv, .parquet{% if tb.notes %}; {{ t.notes }} {{ tb.notes }}{% endif %}</p>
{% endfor %}{% endfor %}
<h2>{{ t.notes }}</h2><ol class="fn">{% for n in notes %}<li>{{ n.name }} ({{ n.label }}, v{{ n.version }}, metrics catalog {{ catalog_version }}): {{ n.formula }} [{{ n.unit }}; {{ n.view }}.{{ n.column }}]</li>{% endfor %}</ol>
</body></html>""")


def fmt(v: object) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.0f}" if v.is_integer() and abs(v) >= 10 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _chart(frame, x: str, y: str, path: Path) -> None:
    chart = alt.Chart(frame.to_pandas()).mark_bar().encode(x=alt.X(f"{x}:N", sort=None), y=f"{y}:Q")
    chart = chart.properties(width=480, height=160)
    path.write_bytes(vlc.vegalite_to_png(chart.to_json(), scale=2))


def render(figs: Figures, out: Path, lang: str = "en") -> dict[str, Path]:
    """Write pack.html, pack.pdf, charts/*.png, appendix/*.csv|parquet and figures.json into `out`."""
    from weasyprint import HTML  # imported late: it loads Pango

    t = {k: v[lang] for k, v in TEXT.items()}
    (out / "charts").mkdir()
    (out / "appendix").mkdir()
    spec = figs.spec
    note_no = {m: i for i, m in enumerate(spec.metrics(), 1)}
    label = "label_zh" if lang == "zh" else "label_en"
    headlines = {p: [] for p in spec.parts}
    for f in spec.figures:
        cat = figs.catalog[f.metric]
        headlines[f.part].append({"label": cat[label], "note": note_no[f.metric], "value": fmt(figs.values[f.key]),
                                  "previous": fmt(figs.previous[f.key]),
                                  "change": change(figs.values[f.key], figs.previous[f.key])})
    tables = {p: [] for p in spec.parts}
    for tb in spec.tables:
        frame = figs.tables[tb.key]
        frame.write_csv(out / "appendix" / f"{tb.key}.csv")
        frame.write_parquet(out / "appendix" / f"{tb.key}.parquet")
        chart = None
        if tb.chart and frame.height:
            chart = f"charts/{tb.key}.png"
            _chart(frame, tb.chart[0], tb.chart[1], out / chart)
        tables[tb.part].append({"key": tb.key, "view": tb.view, "chart": chart, "columns": frame.columns,
                                "rows": frame.rows(), "notes": ", ".join(str(note_no[m]) for m in tb.metrics)})
    notes = [{"name": m, "label": figs.catalog[m][label], "version": figs.catalog[m]["metric_version"],
              "formula": figs.catalog[m]["formula"], "unit": figs.catalog[m]["unit"],
              "view": figs.catalog[m]["view_name"], "column": figs.catalog[m]["column_name"]} for m in note_no]
    html = TEMPLATE.render(lang=lang, t=t, month=figs.month.strftime("%Y-%m"), catalog_version=figs.catalog_version,
                           release_id=figs.release_id,
                           generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), parts=spec.parts, part_titles={p: spec.part_titles[p][lang] for p in spec.parts},
                           headlines=headlines, tables=tables, notes=notes, fmt=fmt)
    (out / "pack.html").write_text(html, encoding="utf-8")
    HTML(string=html, base_url=str(out)).write_pdf(out / "pack.pdf")
    (out / "figures.json").write_text(json.dumps({
        "month": figs.month.isoformat(), "catalog_version": figs.catalog_version, "release_id": figs.release_id,
        "lang": lang, "kind": spec.kind, "tenant": figs.tenant,
        "figures": {f.key: {"value": figs.values[f.key], "previous": figs.previous[f.key], "metric": f.metric,
                            "view": f.view, "sql": f.sql} for f in spec.figures},
        "tables": {tb.key: {"view": tb.view, "sql": tb.sql, "rows": figs.tables[tb.key].height} for tb in spec.tables},
    }, indent=2))
    return {"html": out / "pack.html", "pdf": out / "pack.pdf"}
