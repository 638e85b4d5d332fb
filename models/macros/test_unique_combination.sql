{#- Generic test: no two rows share the same values of `columns` (nulls compare equal: a composite key with a
    nullable part, such as gpu_instance_id, stays a key). Fails with one row per duplicated combination. -#}
{% test unique_combination(model, columns) %}
select {{ columns | join(', ') }}, count(*) as n_rows
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}
