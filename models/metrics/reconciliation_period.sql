-- Telemetry reconciliation over the whole loaded window: metrics.telemetry_reconciliation's findings counted per
-- kind, with their GPU-hours (what `gpupool demo` prints). Only kinds with a finding have a row.
with findings as (
  select * from {{ ref('telemetry_reconciliation') }}
),

final as (
  select
    finding,
    count(*) as findings,
    sum(gpu_hours) as gpu_hours
  from findings
  group by finding
)

select * from final
