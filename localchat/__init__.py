"""localchat: a private, fast LLM server for one person's laptop."""

__version__ = "0.1.0"
