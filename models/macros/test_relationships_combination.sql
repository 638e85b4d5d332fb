{#- Generic test: every row whose `columns` are all non-null finds a row of `to` with the same values in `fields`
    (the composite form of dbt's relationships test). Fails with one row per orphaned combination. -#}
{% test relationships_combination(model, columns, to, fields) %}
select distinct {% for c in columns %}child.{{ c }}{{ ", " if not loop.last }}{% endfor %}
from {{ model }} as child
where {% for c in columns %}child.{{ c }} is not null and {% endfor %}not exists (
  select 1
  from {{ to }} as parent
  where {% for c in columns %}parent.{{ fields[loop.index0] }} = child.{{ c }}{{ " and " if not loop.last }}{% endfor %}
)
{% endtest %}
