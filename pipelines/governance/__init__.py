"""The idle-reclaim loop, the side-effecting half of governance: the outbox, one tick against a live
allocator (live inputs, plan, deliver), the same loop over the simulated pool, and the wiring from
gpupool.yml (factory). The rules it applies are pipelines/policies/."""
