with final as (
  select * from {{ ref('dim_gpus') }}
)

select * from final
