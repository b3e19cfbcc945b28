"""Trainers that are not proofgrid's, run as proofgrid jobs from a trainer spec (``conf/trainer/<name>.yaml``).

``spec`` parses a spec and fills its command's placeholders (standard library only: the launcher does it
while it plans); ``python -m trainer.external`` is the job's program: it runs the trainer's command in its
own output directory, reads its metrics (``metrics``) and final model (``checkpoint``), evaluates that
model with proofgrid's evaluator and writes the run directory contract (``run``), so the evidence judges
every trainer alike. ``process`` is the trainer's process: its output, its stop, its outside writes.
"""
