"""Live tracking (``tracking.live``): the trackers a job's metrics can go to while it runs, the extra each needs,
and where each writes by default. The job runtime's follower (``launcher.runtime.tracking``) does the logging;
the offline export (``python -m evidence export``) stays the default way to a tracker."""

from __future__ import annotations

LIVE_TOOLS = ("wandb", "mlflow", "tensorboard")
# The extra of facts.extras.EXTRAS each tracker's library comes with (TensorBoard is in the `train` extra).
LIVE_EXTRAS = {"wandb": "export", "mlflow": "export"}
# <sweep>/tracking/<tool>/: where mlflow (a file store) and tensorboard (one run directory per job) write when
# tracking.uri is not set; W&B keeps its local files under the job's roots/cache/wandb/.
LIVE_DIR = "tracking"
DEFAULT_PROJECT = "proofgrid"  # the W&B project / MLflow experiment when tracking.project is not set
# How often the follower looks at the job's metrics.jsonl for new lines, and how long the runtime waits for it to
# finish the tracker's run once the trainer is gone (then it is stopped: the job's end never waits on a tracker).
POLL_S = 1.0
FINISH_TIMEOUT_S = 120
