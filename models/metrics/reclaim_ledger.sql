with final as (
  select * from marts.fct_reclaim_ledger
)

select * from final
