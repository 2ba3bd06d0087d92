"""mpidwe: distributed word embeddings (SGNS) over MPI."""

__version__ = "0.1.0"
