"""One APIRouter per resource of the OpenAI-compatible surface."""
