"""private-llm-installer: from a YAML inventory to hosts serving an LLM behind an OpenAI-compatible API."""

__version__ = "0.1.0"
