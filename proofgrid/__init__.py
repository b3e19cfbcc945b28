"""proofgrid's console command, ``proofgrid <command> ...`` (``proofgrid/cli.py``): one entry point over
the launcher (``python launch.py``, ``python -m launcher``) and the evidence (``python -m evidence``),
which all keep working as they are."""
