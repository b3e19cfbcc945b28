"""A job judged from its files: the gates each finished run must pass (metrics log, artifacts, ranks, data
ledger, plan binding, run outputs), its incidents, and the accept/reject index they give."""
