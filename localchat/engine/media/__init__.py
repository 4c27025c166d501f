"""Images and audio in a prompt: the projector that reads them (vision.py)."""
