"""What a reviewer asks of a comparison beyond mean ± SD and the t-interval (issue 22), one idea per module.

``power``: the smallest difference a paired design detects; ``family``: p-values and Holm's correction
across several pairs; ``resampling``: the paired bootstrap interval; ``robust``: rliable's interquartile
mean and probability of improvement; ``noise``: an evaluation's own sampling error against the seeds' spread;
``crossed``: the evaluation's noise with seeds crossed with prompts (the crossed bootstrap, the question-clustered
t-interval); ``paired_questions``, ``components``, ``allocation``, ``wilson``: the question as the unit the evaluation samples
(issue 32 §2: the question-clustered paired difference, the crossed variance components, where the next unit of
compute goes, a run's Wilson interval); ``claims``: what a comparison may claim, one rule per function
(the report's first line, its tables, the verdict and the audit all call it); ``headline``: that first line in
words; ``descriptive``: seed 000's definitions, which the rest build on. No module here reads a file.
"""

from evidence.statistics import (
    allocation,
    claims,
    components,
    crossed,
    family,
    noise,
    paired_questions,
    resampling,
    robust,
    wilson,
)
from evidence.statistics.power import MDE_POWER, minimum_detectable_effect, paired_t_power

__all__ = ["MDE_POWER", "allocation", "claims", "components", "crossed", "family", "noise", "paired_questions",
           "resampling", "robust", "wilson", "minimum_detectable_effect", "paired_t_power"]
