"""The pack as HTML (Jinja2), PDF (WeasyPrint) and PNG charts (Altair -> vl-convert), plus the
CSV/Parquet appendix of every table."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import altair as alt
import jinja2
import polars as pl
import vl_convert as vlc

from pipelines.labels import COVERAGE_WORDS, VALUE_LABELS, value_label
from pipelines.pack.figures import Figures
from pipelines.pack.labels import column_label

TEXT = {
    "title": {"en": "GPU pool monthly review", "zh": "GPU资源池月度报告"},
    "catalog": {"en": "Metric catalog version", "zh": "指标目录版本"},
    "release": {"en": "Data release", "zh": "数据版本"},
    "metric": {"en": "Metric", "zh": "指标"}, "value": {"en": "This month", "zh": "本月"},
    "previous": {"en": "Previous month", "zh": "上月"}, "change": {"en": "Change", "zh": "变化"},
    "notes": {"en": "Definitions", "zh": "指标定义"}, "appendix": {"en": "Appendix", "zh": "附录"},
    "source": {"en": "Source", "zh": "来源"},
    "questions": {"en": "Five questions, answered", "zh": "五个问题的回答"},
    "tenant_title": {"en": "GPU pool monthly review for", "zh": "GPU资源池团队月度报告："},
    "tenant_questions": {"en": "Your team's month, answered", "zh": "团队本月情况问答"},
    "decisions": {"en": "Decisions requested this month", "zh": "本月需决策事项"},
    "no_decisions": {"en": "None this month.", "zh": "本月无。"},
    "evidence": {"en": "evidence", "zh": "依据"},
    "toc": {"en": "Contents", "zh": "目录"},
    "glossary": {"en": "Glossary of the metrics used", "zh": "所用指标说明"},
    "definition": {"en": "Definition", "zh": "定义"}, "formula": {"en": "Formula", "zh": "公式"},
    "unit": {"en": "Unit", "zh": "单位"}, "version": {"en": "Version", "zh": "版本"},
    "no_data": {"en": "no data", "zh": "无数据"}, "no_rows": {"en": "No rows this month.", "zh": "本月无数据。"},
    "yes": {"en": "yes", "zh": "是"}, "no": {"en": "no", "zh": "否"},
    "on_track": {"en": "On track", "zh": "正常"}, "watch": {"en": "Watch", "zh": "关注"},
    "act": {"en": "Act", "zh": "需行动"}, "gpu_hours": {"en": "GPU-hours", "zh": "GPU小时"},
    # the month's coverage (pipelines/coverage.py): page 1 and each part's headline figures
    **COVERAGE_WORDS,
    "partial": {"en": "Partial month: {phrase}. The figures cover those days only, and no status is better than "
                      "“Watch”.", "zh": "数据不完整：{phrase}。各项数字只覆盖这些天，状态最好为“关注”。"},
    "complete": {"en": "Complete month: {phrase}.", "zh": "完整月份：{phrase}。"},
    "covers": {"en": "These figures cover {phrase}.", "zh": "以下数字覆盖{phrase}。"},
    "days_of": {"en": "{n} of {m} days", "zh": "{m}天中{n}天"},
    # WeasyPrint's generated content: the page footer and the page a link points to
    "page_of": {"en": '"Page " counter(page) " of " counter(pages)', "zh": '"第 " counter(page) " 页，共 " counter(pages) " 页"'},
    "page_ref": {"en": '" (p. " target-counter(attr(href), page) ")"', "zh": '"（第 " target-counter(attr(href), page) " 页）"'},
}

# autoescaped: job names, failure reasons and tenant names are users' text, and the PDF renderer would
# fetch any <img src> a job name smuggled in (a local file, an internal URL)
TEMPLATE = jinja2.Environment(autoescape=True).from_string("""<!doctype html><html lang="{{ lang }}"><head><meta charset="utf-8">
<title>{{ title }} {{ month }}</title><style>
@page { size: A4; margin: 14mm 14mm 16mm; @bottom-right { content: {{ t.page_of | safe }}; font-size: 8pt; color: #555 } }
body { font-family: "Noto Sans", "Noto Sans CJK SC", "DejaVu Sans", sans-serif; font-size: 9pt; color: #222; }
h1 { font-size: 17pt; margin: 0 } h2 { font-size: 12pt; border-bottom: 1px solid #888; margin-top: 12pt; }
h2.part, h2.toc, h2.glossary { page-break-before: always; margin-top: 0 }
h3 { font-size: 10pt; margin: 10pt 0 2pt; page-break-after: avoid } table { border-collapse: collapse; width: 100%; margin-bottom: 4pt }
td, th { border-bottom: 1px solid #ddd; padding: 1.5pt 4pt; text-align: left; font-size: 8pt; vertical-align: top }
th { background: #f2f2f2 } table.wide td, table.wide th { font-size: 6.5pt; padding: 1pt 2pt } td.n { text-align: right; white-space: nowrap } .fn { font-size: 7pt; color: #555 }
img { width: 100%; } .meta { color: #555; margin: 2pt 0 8pt }
.q { margin: 0 0 7pt; page-break-inside: avoid } .q .qt { font-weight: bold; font-size: 10pt }
.q p { margin: 1pt 0 0 }
.cov { margin: 0 0 8pt; padding: 3pt 5pt; border-left: 3pt solid #2e7d32 } .cov.partial { border-left-color: #e08e0b; background: #fff6e5 }
.badge { display: inline-block; min-width: 42pt; text-align: center; padding: 1pt 4pt; border-radius: 3pt;
  color: #fff; font-size: 8pt; font-weight: bold; margin-right: 4pt }
.on_track { background: #2e7d32 } .watch { background: #e08e0b } .act { background: #c62828 }
a { color: #1a4f8b; text-decoration: none } a.ref::after { content: {{ t.page_ref | safe }}; color: #555 }
ul.toc { list-style: none; padding-left: 0 } ul.toc ul { list-style: none; padding-left: 12pt }
ul.toc a::after { content: leader(".") target-counter(attr(href), page) }
ul.dec li { margin-bottom: 3pt }
</style></head><body>
<h1>{{ title }} — {{ month }}</h1>
<p class="meta">{{ t.catalog }}: <b>{{ catalog_version }}</b> · {{ t.release }}: <b>{{ release_id }}</b> · {{ generated }}</p>
{% if coverage %}<div class="cov{% if coverage.partial %} partial{% endif %}" id="coverage"><b>{{ t.coverage }}</b>: {{ coverage.headline }}
<br><span class="fn">{% for k in coverage.kinds %}{{ k.label }}: {{ k.days }}{% if not loop.last %} · {% endif %}{% endfor %}</span></div>{% endif %}
<h2>{{ questions_title }}</h2>
{% for a in answers %}<div class="q"><div class="qt"><span class="badge {{ a.status }}">{{ t[a.status] }}</span>{{ loop.index }}. {{ a.question }}</div>
<p>{{ a.answer }} <a class="ref" href="#{{ a.evidence }}">{{ t.evidence }}: {{ titles.get(a.evidence, a.evidence) }}</a></p></div>
{% endfor %}
<h2>{{ t.decisions }}</h2>
{% if decisions %}<ul class="dec">{% for d in decisions %}<li>{{ d.text }} <a class="ref" href="#{{ d.evidence }}">{{ t.evidence }}</a></li>{% endfor %}</ul>
{% else %}<p>{{ t.no_decisions }}</p>{% endif %}
<h2 class="toc">{{ t.toc }}</h2><ul class="toc">
{% for part in parts %}<li><a href="#part-{{ part }}">{{ part_titles[part] }}</a>
<ul>{% for tb in tables[part] %}<li><a href="#{{ tb.key }}">{{ tb.title }}</a></li>{% endfor %}</ul></li>{% endfor %}
<li><a href="#glossary">{{ t.glossary }}</a></li></ul>
{% for part in parts %}<h2 class="part" id="part-{{ part }}">{{ part_titles[part] }}</h2>
{% if headlines[part] and coverage and coverage.partial %}<p class="fn">{{ coverage.covers }}</p>{% endif %}
{% if headlines[part] %}<table><tr><th>{{ t.metric }}</th><th>{{ t.value }}</th><th>{{ t.previous }}</th><th>{{ t.change }}</th></tr>
{% for h in headlines[part] %}<tr><td>{{ h.label }}<sup>{{ h.note }}</sup></td><td class="n">{{ h.value }}</td>
<td class="n">{{ h.previous }}</td><td class="n">{{ h.change }}</td></tr>{% endfor %}</table>{% endif %}
{% for tb in tables[part] %}<h3 id="{{ tb.key }}">{{ tb.title }}</h3>
{% if tb.chart %}<img src="{{ tb.chart }}">{% endif %}
{% if tb.rows %}<table{% if tb.columns | length > 8 %} class="wide"{% endif %}><tr>{% for c in tb.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in tb.rows %}<tr>{% for v, n in row %}<td{% if n %} class="n"{% endif %}>{{ v }}</td>{% endfor %}</tr>{% endfor %}
</table>{% else %}<p>{{ t.no_rows }}</p>{% endif %}<p class="fn">{{ t.source }}: metrics.{{ tb.view }}; {{ t.appendix }}: appendix/{{ tb.key }}.csv, .parquet{% if tb.notes %}; {{ t.notes }} {{ tb.notes }}{% endif %}</p>
{% endfor %}{% endfor %}
<h2 class="glossary" id="glossary">{{ t.glossary }}</h2>
<p>{{ t.catalog }}: <b>{{ catalog_version }}</b></p>
<table><tr><th>#</th><th>{{ t.metric }}</th><th>{{ t.definition }}</th><th>{{ t.formula }}</th><th>{{ t.unit }}</th><th>{{ t.version }}</th></tr>
{% for n in notes %}<tr><td>{{ loop.index }}</td><td><b>{{ n.label }}</b><br><span class="fn">{{ n.name }}; {{ n.view }}.{{ n.column }}</span></td>
<td>{{ n.description }}</td><td class="fn">{{ n.formula }}</td><td>{{ n.unit }}</td><td>{{ n.version }}</td></tr>{% endfor %}</table>
</body></html>""")


CHART_FONT = {"en": "DejaVu Sans", "zh": "Noto Sans CJK SC"}


def duration(seconds: float) -> str:
    """Seconds as a reader says them: "45 s", "12 min", "3 h 05 min"."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours:,} h {minutes:02d} min"


def fmt(v: object, unit: str = "", lang: str = "en") -> str:
    """A value for the reader. unit: the catalog's unit, or the column's suffix (`_s` seconds, `_pct` percent)."""
    if v is None:
        return TEXT["no_data"][lang]
    if isinstance(v, bool):
        return TEXT["yes" if v else "no"][lang]
    if isinstance(v, int | float) and unit == "seconds":
        return duration(float(v))
    if isinstance(v, float):  # a whole number without decimals, so that a column of counts reads alike
        text = f"{v:,.0f}" if v.is_integer() else f"{v:,.1f}"
    elif isinstance(v, int):
        text = f"{v:,}"
    elif isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M")
    else:
        return str(v)
    return f"{text}%" if unit == "percent" else text


def column_unit(column: str) -> str:
    """The unit a column's name says (the packs' convention: `_s` seconds, `_pct` percent)."""
    return "seconds" if column.endswith("_s") else "percent" if column.endswith("_pct") else ""


def change(value: float | None, previous: float | None, unit: str, lang: str) -> str:
    """The change from the previous month in the figure's unit: percentage points for a percentage, the
    relative change beside an absolute one otherwise."""
    if value is None or previous is None:
        return TEXT["no_data"][lang]
    delta = value - previous
    if unit == "percent":
        return f"{delta:+,.1f} pp"
    text = ("+" if delta >= 0 else "-") + duration(abs(delta)) if unit == "seconds" else f"{delta:+,.1f}"
    return text if previous == 0 else f"{text} ({100 * delta / abs(previous):+.1f}%)"


def _chart(frame, x: str, y: str | tuple[str, ...], mark: str, labels: dict[str, str], title: str,
           lang: str, path: Path) -> None:
    """A titled chart with axis titles in the pack's language; days as "Nov 03" (en) or "11-03" (zh)."""
    ys = (y,) if isinstance(y, str) else y
    data = frame.select(x, *ys)
    if x == "day":  # one tick per day, as text: a time axis puts hourly ticks on a short month
        data = data.with_columns(pl.col(x).dt.strftime("%b %d" if lang == "en" else "%m-%d"))
    data = data.rename({c: labels[c] for c in (x, *ys)}).to_pandas()
    xenc = alt.X(f"{labels[x]}:N", sort=None, axis=alt.Axis(labelAngle=-45, labelLimit=160, title=labels[x]))
    base = alt.Chart(data, title=title)
    if len(ys) > 1:
        chart = base.transform_fold([labels[c] for c in ys], as_=["series", "value"]).mark_line(point=True).encode(
            x=xenc, y=alt.Y("value:Q", title=TEXT["gpu_hours" if all(c.endswith("gpu_hours") for c in ys) else "value"][lang]),
            color=alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom")))
    else:
        chart = (base.mark_line(point=True) if mark == "line" else base.mark_bar()).encode(
            x=xenc, y=alt.Y(f"{labels[ys[0]]}:Q", title=labels[ys[0]]))
    # the pack's own sans-serif (vl-convert falls back to a serif CJK font for Chinese otherwise)
    chart = chart.properties(width=500, height=190).configure(font=CHART_FONT[lang]) \
        .configure_axis(labelFontSize=10, titleFontSize=11)
    path.write_bytes(vlc.vegalite_to_png(chart.to_json(), scale=2))


def labelled(frame: pl.DataFrame, lang: str) -> pl.DataFrame:
    """The frame with its category keys (pipelines/labels.py VALUE_LABELS) replaced by their labels."""
    return frame.with_columns(
        pl.col(c).replace({k: v[lang] for k, v in VALUE_LABELS[c].items()})
        for c, dtype in frame.schema.items() if c in VALUE_LABELS and dtype == pl.String)


# columns of English prose as the warehouse keeps it (a policy's reason as it logged it): a table that shows
# one carries its key beside it (the policy's kind, labelled in both languages), which the Chinese pack shows
# alone; the appendix keeps both
ENGLISH_PROSE = frozenset({"reason"})


def _shown(columns: list[str], lang: str) -> list[str]:
    """The columns a table shows: of a text given in both languages (`x` and `x_zh`), the pack's one; in
    Chinese, no English prose (ENGLISH_PROSE)."""
    return [c for c in columns if not (lang == "en" and c.endswith("_zh") and c[:-3] in columns)
            and not (lang == "zh" and (f"{c}_zh" in columns or c in ENGLISH_PROSE))]


def local_fetcher(out: Path):
    """The PDF renderer's fetcher: the pack's own files (its charts) only, never another file or a URL."""
    from weasyprint.urls import URLFetcher  # imported late: weasyprint loads Pango

    inside = out.resolve().as_uri() + "/"

    class PackFiles(URLFetcher):
        def fetch(self, url, headers=None):
            if not url.startswith(inside) or "/../" in url:
                raise ValueError(f"review pack: refusing to fetch {url!r}: only the pack's own files are read")
            return super().fetch(url, headers)

    return PackFiles(allowed_protocols={"file"})


def _coverage(figs: Figures, t: dict[str, str], lang: str) -> dict | None:
    """Page 1's coverage line: complete or partial, "N of M days", and each kind of source's days (those the
    release holds, and the required ones it does not: "not collected")."""
    cov = figs.coverage
    if cov is None:
        return None
    m = cov.days_in_period
    kinds = [{"label": k.label[lang], "days": t["days_of"].format(n=k.days_with_data, m=m) if k.collected
              else t["not_collected"]} for k in cov.kinds if k.collected or k.required]
    phrase = cov.phrase(lang)
    return {"partial": cov.partial, "headline": t["partial" if cov.partial else "complete"].format(phrase=phrase),
            "covers": t["covers"].format(phrase=phrase), "kinds": kinds}


def render(figs: Figures, out: Path, lang: str = "en") -> dict[str, Path]:
    """Write pack.html, pack.pdf, charts/*.png, appendix/*.csv|parquet and figures.json into `out`."""
    from weasyprint import HTML  # imported late: it loads Pango

    t = {k: v[lang] for k, v in TEXT.items()}
    (out / "charts").mkdir()
    (out / "appendix").mkdir()
    spec = figs.spec
    month = figs.month.strftime("%Y-%m")
    note_no = {m: i for i, m in enumerate(spec.metrics(), 1)}
    label = "label_zh" if lang == "zh" else "label_en"
    described = "description_zh" if lang == "zh" else "description"  # the glossary's definitions
    headlines = {p: [] for p in spec.parts}
    for f in spec.figures:
        cat = figs.catalog[f.metric]
        value, previous = figs.values[f.key], figs.previous[f.key]
        headlines[f.part].append({"label": cat[label], "note": note_no[f.metric], "value": fmt(value, cat["unit"], lang),
                                  "previous": fmt(previous, cat["unit"], lang),
                                  "change": change(value, previous, cat["unit"], lang)})
    tables = {p: [] for p in spec.parts}
    titles = {}
    for tb in spec.tables:
        frame = figs.tables[tb.key]
        frame.write_csv(out / "appendix" / f"{tb.key}.csv")
        frame.write_parquet(out / "appendix" / f"{tb.key}.parquet")
        labels = {c: column_label(tb.view, c, lang, figs.catalog) for c in frame.columns}
        frame = labelled(frame, lang)  # the keys' words in the pack's language; the appendix keeps the keys
        titles[tb.key] = tb.title[lang] if tb.title else tb.key
        chart = None
        if tb.chart and frame.height:
            chart = f"charts/{tb.key}.png"
            _chart(frame, *tb.chart, labels, titles[tb.key], lang, out / chart)
        shown = _shown(frame.columns, lang)
        rows = [[(fmt(r[c], column_unit(c), lang), isinstance(r[c], int | float)) for c in shown]
                for r in frame.select(shown).iter_rows(named=True)]
        tables[tb.part].append({"key": tb.key, "title": titles[tb.key], "view": tb.view, "chart": chart,
                                "columns": [labels[c] for c in shown], "rows": rows,
                                "notes": ", ".join(str(note_no[m]) for m in tb.metrics)})
    notes = [{"name": m, "label": figs.catalog[m][label], "version": figs.catalog[m]["metric_version"],
              "description": figs.catalog[m][described], "formula": figs.catalog[m]["formula"],
              "unit": value_label("unit", figs.catalog[m]["unit"], lang), "view": figs.catalog[m]["view_name"],
              "column": figs.catalog[m]["column_name"]} for m in note_no]
    answers = [{"question": a.question[lang], "answer": a.answer[lang], "status": a.status, "evidence": a.evidence}
               for a in figs.answers]
    decisions = [{"text": d.text[lang], "evidence": d.evidence} for d in figs.decisions]
    title = t["title"] if figs.tenant is None else f"{t['tenant_title']} {figs.tenant}"
    questions_title = t["questions"] if figs.tenant is None else t["tenant_questions"]
    html = TEMPLATE.render(lang=lang, t=t, coverage=_coverage(figs, t, lang), title=title, questions_title=questions_title, month=month, catalog_version=figs.catalog_version,
                           release_id=figs.release_id,
                           generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), parts=spec.parts,
                           part_titles={p: spec.part_titles[p][lang].replace("{month}", month) for p in spec.parts},
                           headlines=headlines, tables=tables, titles=titles, notes=notes, answers=answers,
                           decisions=decisions)
    (out / "pack.html").write_text(html, encoding="utf-8")
    HTML(string=html, base_url=str(out), url_fetcher=local_fetcher(out)).write_pdf(out / "pack.pdf")
    (out / "figures.json").write_text(json.dumps({
        "month": figs.month.isoformat(), "catalog_version": figs.catalog_version, "release_id": figs.release_id,
        "lang": lang, "kind": spec.kind, "tenant": figs.tenant,
        "coverage": None if figs.coverage is None else figs.coverage.as_dict(),
        "figures": {f.key: {"value": figs.values[f.key], "previous": figs.previous[f.key], "metric": f.metric,
                            "view": f.view, "sql": f.sql} for f in spec.figures},
        "tables": {tb.key: {"view": tb.view, "sql": tb.sql, "rows": figs.tables[tb.key].height} for tb in spec.tables},
        "answers": [{"key": a.key, "status": a.status, "value": a.value, "evidence": a.evidence,
                     "sources": list(a.sources), "question": a.question[lang], "answer": a.answer[lang]}
                    for a in figs.answers],
        "decisions": [{"text": d.text[lang], "evidence": d.evidence, "sources": list(d.sources)}
                      for d in figs.decisions],
    }, indent=2))
    return {"html": out / "pack.html", "pdf": out / "pack.pdf"}
