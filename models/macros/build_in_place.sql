{#- A table is rebuilt under its own name, not swapped into place. DuckDB's DDL is transactional: the drop and
    the create commit together, so a model that fails leaves its old table, and readers never see the
    writers' file mid-build anyway (they read releases; `gpupool build` even builds on a copy of it).
    dbt-duckdb builds in place the tables that have foreign keys: saying every table has them takes that
    path (drop, then create, in the model's transaction) and saves each rebuilt table two renames and a
    drop; the drop itself runs in the model's own macro context. Each adapter call these save builds a
    whole macro context of its own (bench/README.md "A small build"). No model declares a key, so nothing
    references a table and none is dropped for one. A Python model keeps the swap: it writes its table
    from a cursor of its own, which a drop pending in the model's transaction blocks. -#}
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

{#- A view likewise: dropped and created under its own name in one transaction, where dbt's default creates
    it under a temporary name, renames the old one away and the new one in, and drops the old (three
    adapter calls a view, 67 views on a first or changed-project build). -#}
{%- materialization view, adapter='duckdb' -%}
  {%- set existing_relation = load_cached_relation(this) -%}
  {%- set target_relation = this.incorporate(type='view') -%}
  {%- set grant_config = config.get('grants') -%}
  {{ run_hooks(pre_hooks, inside_transaction=False) }}
  -- `BEGIN` happens here:
  {{ run_hooks(pre_hooks, inside_transaction=True) }}
  {% if existing_relation is not none %}
    {% do drop_relation_for_rebuild(existing_relation) %}
  {% endif %}
  {% call statement('main') -%}
    {{ get_create_view_as_sql(target_relation, sql) }}
  {%- endcall %}
  {% do apply_grants(target_relation, grant_config, should_revoke=should_revoke(existing_relation, full_refresh_mode=True)) %}
  {% do persist_docs(target_relation, model) %}
  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ adapter.commit() }}
  {{ run_hooks(post_hooks, inside_transaction=False) }}
  {{ return({'relations': [target_relation]}) }}
{%- endmaterialization -%}
