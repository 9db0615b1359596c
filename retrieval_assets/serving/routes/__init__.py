"""The HTTP API's routes, one ``APIRouter`` per family: search, documents, operations (health and metrics)."""
