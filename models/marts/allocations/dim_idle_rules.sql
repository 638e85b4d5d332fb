-- the idle rule of the policy catalog (models/policies/policies.yml, the idle_allocation policy),
-- resolved per queue and template by pipelines/policies/idle.py:idle_rule_rows and passed by every
-- dbt invocation as var idle_rules (pipelines/build.py:dbt_vars): the one definition the live policy reads too
{%- set rules = var('idle_rules', []) %}
{%- if execute and not rules %}
  {{ exceptions.raise_compiler_error("var idle_rules is missing: build with `gpupool build` (or the Dagster build asset), which passes the policy catalog's idle rule") }}
{%- endif %}
with rules as (
  select * from (values
  {%- for r in rules %}
    (
      {{ "null" if r.queue is none else "'" ~ (r.queue | replace("'", "''")) ~ "'" }},
      {{ "null" if r.template is none else "'" ~ (r.template | replace("'", "''")) ~ "'" }},
      '{{ r.policy | replace("'", "''") }}',
      '{{ r.scope | replace("'", "''") }}',
      {{ "true" if r.enabled else "false" }},
      {{ r.activity_threshold }},
      {{ r.window_minutes }},
      {{ "null" if r.memory_floor_mib is none else r.memory_floor_mib }},
      {{ r.spike_max_minutes }},
      {{ r.min_coverage }}
    ){{ "," if not loop.last }}
  {%- endfor %}
  -- the alias only names the values' columns
  ) rule_rows (  -- noqa: AL05
    queue, template, policy, policy_scope, is_enabled, activity_threshold, window_minutes, memory_floor_mib,
    spike_max_minutes, min_coverage
  )
),

final as (
  select
    cast(queue as varchar) as queue,
    cast(template as varchar) as template,
    cast(policy as varchar) as policy,
    cast(policy_scope as varchar) as policy_scope,
    cast(is_enabled as boolean) as is_enabled,
    cast(activity_threshold as double) as activity_threshold,
    cast(window_minutes as double) as window_minutes,
    cast(memory_floor_mib as double) as memory_floor_mib,
    cast(spike_max_minutes as double) as spike_max_minutes,
    cast(min_coverage as double) as min_coverage
  from rules
)

select * from final
