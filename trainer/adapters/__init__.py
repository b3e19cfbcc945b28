"""Other people's trainers run as proofgrid jobs: programs a ``trainer=<name>`` spec starts as its command.

Each adapter is a ``python -m trainer.adapters.<name>`` program that takes its settings as explicit
arguments, trains with the other library's own trainer, and writes that library's own files (event
logs, checkpoints, a Hugging Face model directory) at paths its docstring names. It uses proofgrid's
data and reward code (``trainer.data``, ``facts.reward``) so that every trainer sees the same
prompts and is scored by the same function; it never imports the launcher.
"""

# The plan checks a trainer spec may name (its ``plan_check``), and no other function of an adapter: each is called
# in the launcher while it plans, dry runs included, with the job's expanded argv, and refuses with a ``ValueError``
# whose text is one line. It imports nothing heavy, runs nothing and writes nothing (an adapter's ``main`` trains).
PLAN_CHECKS = frozenset({
    "trainer.adapters.trl_grpo:check_command",  # TRL's GRPOTrainer: what TRL cannot honour (no TRL imported)
})
