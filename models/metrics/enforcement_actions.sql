with final as (
  select * from {{ ref('fct_enforcement_actions') }}
)

select * from final
