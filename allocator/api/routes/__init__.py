"""One APIRouter per resource; `allocator.service.create_app` includes them all."""
