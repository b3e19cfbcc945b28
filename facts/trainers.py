"""Trainer specs (``conf/trainer/<name>.yaml``): the name of proofgrid's own trainer and the fields a spec
declares (beside them a spec holds its trainer's own options). The parser is ``trainer.external.trainer_spec``;
the evidence reads the same names from the runs' recorded configuration."""

from __future__ import annotations

PROOFGRID_TRAINER = "proofgrid"  # conf/trainer/proofgrid.yaml: python -m trainer, the default
# What a spec declares about running its trainer; they say how it runs, not what it computes (its own
# options, such as TRL's loss_type, do).
TRAINER_SPEC_FIELDS = ("name", "command", "metrics", "checkpoint", "resume", "stop_signal", "checkpointed_exit",
                       "declares", "contract", "algorithm", "plan_check", "requires_extra")
