"""Reading dataset files into rows: JSONL, JSON, Parquet, Arrow and local Hugging Face dataset
directories, each row with its origin (`file:line`) and bad rows with the reason.

Shared by the task publisher (producers), the run plan (consumers) and the trainer's demonstration
sources (rft.buffer), so it lives in the library.
"""
