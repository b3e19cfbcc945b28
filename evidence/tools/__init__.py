"""What a user runs on a sweep or a bundle besides build and audit: compare, load (pyarrow tables), export
(W&B, MLflow)."""
