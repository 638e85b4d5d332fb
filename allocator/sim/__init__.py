"""The simulation: the allocator's engine in virtual time (`simulator`), fed by a calibrated workload
(`workload`), with a platform team acting on it (`admin`). The live service never imports it."""
