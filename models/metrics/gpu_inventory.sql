with final as (
  select * from marts.dim_gpus
)

select * from final
