{#- A table is rebuilt under its own name, not swapped into place. The build runs on a copy of the writers'
    file that replaces it only once every model built (pipelines/build.py), so the last good table never
    depended on the swap. dbt-duckdb builds in place the tables that have foreign keys: saying every table
    has them takes that path (drop, then create, in the model's transaction) and saves each rebuilt table
    two renames and a drop; the drop itself runs in the model's own macro context. Each adapter call these
    save builds a whole macro context of its own (bench/README.md "A small build"). No model declares a
    key, so nothing references a table and none is dropped for one. A Python model keeps the swap: it
    writes its table from a cursor of its own, which a drop pending in the model's transaction blocks. -#}
{% macro has_foreign_key_constraints(relation=none) -%}
  {{ return(model.language != 'python') }}
{%- endmacro %}

{% macro may_be_foreign_key_target(relation=none) -%}
  {{ return(false) }}
{%- endmacro %}

{% macro drop_relation_for_rebuild(relation) -%}
  {% do adapter.ensure_transaction() %}
  {% do adapter.cache_dropped(relation) %}
  {% do drop_relation(relation) %}
  {{ return([]) }}
{%- endmacro %}
