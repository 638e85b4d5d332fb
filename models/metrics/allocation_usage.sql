with final as (
  select * from {{ ref('fct_allocation_usage') }}
)

select * from final
