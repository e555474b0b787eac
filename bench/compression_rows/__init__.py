"""The rows of bench/compression.py, one module per direction."""
