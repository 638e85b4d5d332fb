with final as (
  select * from {{ ref('fct_reclaim_ledger') }}
)

select * from final
