{#- A model lands in the schema its folder names (staging, marts, metrics); a seed in seeds. -#}
{% macro generate_schema_name(custom_schema_name, node) -%}
  {%- if custom_schema_name -%}{{ custom_schema_name }}
  {%- elif node.resource_type == 'model' -%}{{ node.original_file_path.split('/')[0] }}
  {%- else -%}{{ target.schema }}{%- endif -%}
{%- endmacro %}
