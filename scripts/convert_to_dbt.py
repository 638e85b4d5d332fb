"""One-off: turn models/ into a dbt project (spike for issue 13). Run from the repo root."""
import re, sys, yaml
from pathlib import Path
sys.path.insert(0, ".")
ROOT = Path("models")
LAYERS = ("staging", "marts", "metrics")
REF = re.compile(r"\b(raw|ops|governance|seeds|staging|marts|metrics)\.([a-z_][a-z0-9_]*)\b")
TOKEN = re.compile(r"--[^\n]*|'(?:[^']|'')*'")

def convert_sql(sql: str, own: str) -> tuple[str, set]:
    out, pos, srcs = [], 0, set()
    def sub(code):
        def rep(m):
            schema, name = m.groups()
            if f"{schema}.{name}" == own: return m.group(0)
            if schema in ("raw", "ops", "governance"):
                srcs.add((schema, name)); return "{{ source('%s', '%s') }}" % (schema, name)
            return "{{ ref('%s') }}" % name
        return REF.sub(rep, code)
    for m in TOKEN.finditer(sql):
        out.append(sub(sql[pos:m.start()])); out.append(m.group(0)); pos = m.end()
    out.append(sub(sql[pos:]))
    return "".join(out), srcs

def props(doc, name, extra_meta=None):
    entry = {"name": name, "description": " ".join(str(doc["description"]).split())}
    meta = {"grain": doc["grain"]}
    if extra_meta: meta.update(extra_meta)
    entry["config"] = {"meta": meta}
    cols = []
    for c in doc["columns"]:
        col = {"name": c["name"], "description": c["description"]}
        if c.get("type"): col["data_type"] = c["type"]
        cols.append(col)
    entry["columns"] = cols
    return entry

sources = {}
for layer in LAYERS:
    entries = []
    for sql_path in sorted((ROOT / layer).glob("*.sql")):
        name = sql_path.stem
        sql, srcs = convert_sql(sql_path.read_text(), f"{layer}.{name}")
        for s in srcs: sources.setdefault(s[0], set()).add(s[1])
        side = sql_path.with_suffix(".yml")
        doc = yaml.safe_load(side.read_text())
        extra = {"build": doc["build"]} if "build" in doc else None
        sql_path.write_text(sql)
        entries.append(props(doc, name, extra))
        side.unlink()
    (ROOT / layer / "_models.yml").write_text(yaml.safe_dump({"version": 2, "models": entries}, sort_keys=False, allow_unicode=True, width=110))
seed_entries = []
for csv in sorted((ROOT / "seeds").glob("*.csv")):
    side = csv.with_suffix(".yml"); doc = yaml.safe_load(side.read_text())
    e = props(doc, csv.stem)
    e["config"]["column_types"] = {c["name"]: c["type"] for c in doc["columns"]}
    for c in e["columns"]: c.pop("data_type", None)
    seed_entries.append(e); side.unlink()
(ROOT / "seeds" / "_seeds.yml").write_text(yaml.safe_dump({"version": 2, "seeds": seed_entries}, sort_keys=False, allow_unicode=True, width=110))
from pipelines.contracts import TABLES
described = {t.name: t for t in TABLES} if isinstance(TABLES, (list, tuple)) else TABLES
src_yaml = []
for schema in ("raw", "ops", "governance"):
    tables = [{"name": t} for t in sorted(sources.get(schema, ()))]
    src_yaml.append({"name": schema, "schema": schema, "tables": tables})
(ROOT / "sources.yml").write_text(yaml.safe_dump({"version": 2, "sources": src_yaml}, sort_keys=False, width=110))
print({k: len(v) for k, v in sources.items()})
