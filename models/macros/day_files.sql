{#- Per-minute marts kept as day files beside the warehouse instead of inside it (issues 27 and 30).

    A microbatch model whose config names `day_files` (its day column) is not a table: each batch
    writes its day's rows as Parquet under <home>/lake/marts/<model>/<column>=<day>/ (new files, never
    overwritten), records them in ops.mart_files (one row per file) and makes the model's relation a
    view over every file recorded. The warehouse file keeps a list of file names, so the build's
    staging copy and each publish copy kilobytes, not the marts' history, and a release reads the
    files its own copy of ops.mart_files names (time travel without copying). A build that fails
    leaves the writers' file, and so its list, as it was; the files it wrote are read by nothing and
    pipelines/lake/mart_files.py deletes them once no kept release names them.

    The view names the files relative to the home, found through DuckDB's file_search_path (the
    home, as for the lake's raw views), so a moved home reads them. The files hold the day column
    themselves; the folder name is only for people.

    dbt runs a microbatch model only when it is materialized 'incremental': this project's
    incremental materialization hands the models without `day_files` to dbt-duckdb's own. -#}
{% materialization incremental, adapter='duckdb', supported_languages=['sql'] -%}
  {%- if config.get('day_files') -%}
    {{ return(gpupool_day_files(config.get('day_files'))) }}
  {%- else -%}
    {{ return(dbt.materialization_incremental_duckdb()) }}
  {%- endif -%}
{%- endmaterialization %}

{#- The home the build writes for: its file search path (pipelines/build.py `dbt_vars`), else
    $GPUPOOL_HOME as models/profiles.yml takes it. -#}
{% macro gpupool_home() -%}
  {%- set home = var('duckdb_config', {}).get('file_search_path') or env_var('GPUPOOL_HOME', '.gpupool') -%}
  {{- return(home.rstrip('/')) -}}
{%- endmacro %}

{% macro gpupool_day_files(day_column) -%}
  {%- if model.batch is none -%}
    {{ exceptions.raise_compiler_error(model.name ~ ": day_files needs dbt's microbatch batches (incremental_strategy='microbatch')") }}
  {%- endif -%}
  {%- set home = gpupool_home() -%}
  {%- set folder = 'lake/marts/' ~ this.identifier -%}
  {%- set day = model.batch.event_time_start.strftime('%Y-%m-%d') -%}
  {%- set existing = load_cached_relation(this) -%}
  {%- set view = this.incorporate(type='view') -%}

  {% call statement('mart_files_table') -%}
    create table if not exists ops.mart_files (
      table_name varchar not null,  -- schema.relation
      day date,                     -- null: a file of no rows that only gives the view its columns
      path varchar not null,        -- relative to the home
      invocation_id varchar not null,
      written_at timestamp not null
    )
  {%- endcall %}

  {#- a mart built before day files: its rows become day files (a full refresh rebuilds them anyway) -#}
  {%- if existing is not none and existing.type == 'table' -%}
    {%- if not should_full_refresh() -%}
      {%- do gpupool_register_files(this, gpupool_copy_days('select * from ' ~ existing, home, folder, day_column, invocation_id ~ '_before')) -%}
    {%- endif -%}
    {% call statement('drop_table') -%} drop table {{ existing }} {%- endcall %}
  {%- endif -%}

  {%- if should_full_refresh() -%}
    {#- every file of earlier builds goes: a day without rows now has none -#}
    {% call statement('forget_earlier_builds') -%}
      delete from ops.mart_files where table_name = '{{ this.schema }}.{{ this.identifier }}'
        and invocation_id <> '{{ invocation_id }}'
    {%- endcall %}
  {%- endif -%}

  {%- set written = gpupool_copy_days(sql, home, folder, day_column, invocation_id ~ '_' ~ day) -%}
  {%- for path in written -%}
    {%- if ('/' ~ day_column ~ '=' ~ day ~ '/') not in path -%}
      {{ exceptions.raise_compiler_error(model.name ~ ": the batch of " ~ day ~ " wrote rows of another day (" ~ path ~ "): its " ~ day_column ~ " must be the batch's day") }}
    {%- endif -%}
  {%- endfor -%}
  {% call statement('forget_day') -%}
    delete from ops.mart_files where table_name = '{{ this.schema }}.{{ this.identifier }}'
      and (day = date '{{ day }}'{{ ' or day is null' if written }})
  {%- endcall %}
  {%- do gpupool_register_files(this, written) -%}

  {%- set files = run_query("select path from ops.mart_files where table_name = '" ~ this.schema ~ "." ~ this.identifier ~ "' order by day, path").columns[0].values() -%}
  {%- if files | length == 0 -%}
    {#- no rows on any day: a file of none keeps the view's columns -#}
    {%- set files = gpupool_copy_days('select * from (' ~ sql ~ ') where false', home, folder, none, invocation_id) -%}
    {%- do gpupool_register_files(this, files) -%}
    {%- set files = run_query("select path from ops.mart_files where table_name = '" ~ this.schema ~ "." ~ this.identifier ~ "'").columns[0].values() -%}
  {%- endif -%}

  {% call statement('main') -%}
    create or replace view {{ view }} as
    select * from read_parquet([{%- for f in files %}'{{ f }}'{{ ", " if not loop.last }}{% endfor -%}], hive_partitioning = false)
  {%- endcall %}
  {% do adapter.commit() %}
  {{ return({'relations': [view]}) }}
{%- endmacro %}

{#- Write `query`'s rows as new Parquet files under <home>/<folder>/<day_column>=<day>/ (no day column:
    one file in <home>/<folder>/); returns their paths relative to the home. DuckDB creates the day
    folders; <home>/lake/marts exists (pipelines/warehouse.py `ensure_schema`). -#}
{% macro gpupool_copy_days(query, home, folder, day_column, prefix) -%}
  {%- if day_column -%}
    {%- set options = "format parquet, compression zstd, partition_by (" ~ day_column ~ "), write_partition_columns true, filename_pattern '" ~ prefix ~ "_{uuid}', append" -%}
    {%- set target = home ~ '/' ~ folder -%}
  {%- else -%}
    {%- set options = "format parquet, compression zstd" -%}
    {%- set target = home ~ '/' ~ folder ~ '.' ~ prefix ~ '.empty.parquet' -%}
  {%- endif -%}
  {%- do run_query('copy (' ~ query ~ ') to ' ~ "'" ~ target ~ "' (" ~ options ~ ')') -%}
  {#- the files this copy wrote: its prefix is new (RETURN_FILES' list does not survive dbt's agate) -#}
  {%- set pattern = target ~ '/*/' ~ prefix ~ '_*.parquet' if day_column else target -%}
  {%- set found = run_query("select file from glob('" ~ pattern ~ "') order by file").columns[0].values() -%}
  {%- set paths = [] -%}
  {%- for path in found -%}
    {%- do paths.append(path[(home | length) + 1:]) -%}
  {%- endfor -%}
  {{- return(paths) -}}
{%- endmacro %}

{% macro gpupool_register_files(relation, paths) -%}
  {%- if paths | length > 0 -%}
    {% call statement('register_files') -%}
      insert into ops.mart_files
      select '{{ relation.schema }}.{{ relation.identifier }}',
        try_cast(nullif(regexp_extract(path, '=([0-9]{4}-[0-9]{2}-[0-9]{2})/', 1), '') as date),
        path, '{{ invocation_id }}', current_localtimestamp()
      from (values {%- for p in paths %} ('{{ p }}'){{ "," if not loop.last }}{% endfor %}) f (path)
    {%- endcall %}
  {%- endif -%}
{%- endmacro %}
