"""llama.cpp itself, wrapped: a model and its vocabulary (model.py), a token batch (batch.py),
bytes to text (utf8guard.py), and the pooled contexts of embeddings and reranking (embed.py,
rerank.py)."""
