"""``report.md`` and its parts: the tables, the headline, the figures, the measures specs and compare name."""
