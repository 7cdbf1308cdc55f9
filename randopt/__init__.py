"""randopt: gradient-free post-training of LLMs by random optimization, as cached pipeline stages."""
__version__ = "0.1.0"
