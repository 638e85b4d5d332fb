with final as (
  select * from marts.fct_idle_windows
)

select * from final
