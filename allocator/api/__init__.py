"""The allocator's HTTP API in parts: `settings` (what `create_app` configures), `deps` (the caller,
the store, the shared path and query parameters), `bodies` (request bodies), `wire` (strict JSON in,
safe JSON out, error answers) and `routes/` (one router per resource). `allocator.service.create_app`
assembles them."""
