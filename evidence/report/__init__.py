"""``report.md``: its sections and figures (the tables it shows are ``evidence.tables``)."""
