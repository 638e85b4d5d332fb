with final as (
  select * from {{ ref('dim_queues') }}
)

select * from final
