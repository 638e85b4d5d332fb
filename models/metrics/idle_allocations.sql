with final as (
  select * from {{ ref('fct_idle_windows') }}
)

select * from final
