"""An evaluation re-derived from its rawest data: the frozen subset cut again from its pinned split, the
reward that re-scores its responses, and the re-scoring itself."""
