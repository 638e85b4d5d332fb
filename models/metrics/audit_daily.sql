with records as (
  select * from {{ ref('fct_audit_events') }}
),

final as (
  select
    day,
    source,
    count(*) as audit_records,
    count(*) filter (where category = 'permission_change') as permission_changes,
    count(*) filter (where category = 'quota_change') as quota_changes,
    count(*) filter (where category = 'approval') as approvals,
    count(*) filter (where category = 'enforcement') as enforcement_actions,
    count(*) filter (where category = 'queue_change') as queue_changes,
    count(*) filter (where category in ('other_change', 'other')) as other_changes,
    count(*) filter (where is_denied) as denied_requests,
    count(distinct actor) as actors
  from records
  group by day, source
)

select * from final
