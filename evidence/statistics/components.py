"""Variance components of an evaluation metric in the design the sweep has: S training seeds crossed with P frozen
questions, k responses per (seed, question) cell (``evidence.statistics.crossed``'s design, one level deeper). numpy
only: it runs on the build's and the audit's path.

The model (two-way crossed random effects with replication), for a response y_{s,i,r} (1 when correct) of seed s to
question i, or for a pair's difference of cell means:

    y_{s,i,r} = μ + a_s + b_i + (ab)_{s,i} + e_{s,i,r},   a ~ (0, σ²_seed), b ~ (0, σ²_question),
    (ab) ~ (0, σ²_seed×question), e ~ (0, σ²_response), all independent.

The estimator (balanced: every cell has k responses; ANOVA / expected-mean-squares, Searle, Casella & McCulloch 1992
§4.7), from the cell means ȳ_{s,i}, the seed means ȳ_s, the question means ȳ_i and the grand mean ȳ:

    MS_seed     = k·P·Σ_s (ȳ_s − ȳ)²/(S − 1)                          E = σ²_e + k·σ²_sq + k·P·σ²_seed
    MS_question = k·S·Σ_i (ȳ_i − ȳ)²/(P − 1)                          E = σ²_e + k·σ²_sq + k·S·σ²_question
    MS_sq       = k·Σ_{s,i} (ȳ_{s,i} − ȳ_s − ȳ_i + ȳ)²/((S−1)(P−1))   E = σ²_e + k·σ²_sq
    MS_response = Σ (y − ȳ_{s,i})²/(S·P·(k − 1))                       E = σ²_e

so σ̂²_response = MS_response, σ̂²_sq = (MS_sq − MS_response)/k, σ̂²_seed = (MS_seed − MS_sq)/(k·P),
σ̂²_question = (MS_question − MS_sq)/(k·S), each negative estimate truncated at 0 (the truncated ANOVA estimator; the
mean squares are kept as computed). For 0/1 responses the within-cell sum of squares is Σ_cells c·(k − c)/k (c the
cell's correct responses), so the counts suffice.

For a pair of arms on the same seeds and questions, the same decomposition applies to d_{s,i} = ȳ_{a,s,i} − ȳ_{b,s,i}:
the two arms' responses are independent draws, so the difference's response variance is σ²_{e,a} + σ²_{e,b}
(MS_response of each arm summed, on S·P·(k − 1) df each) and the cell-level mean squares are those of the d block
times k, as above.

The variance of the grand mean (of an arm's pass@1, or of a pair's mean difference), its estimate and its df:

    Var(ȳ) = σ²_seed/S + σ²_question/P + σ²_sq/(S·P) + σ²_response/(S·P·k)
    V̂ = (MS_seed + MS_question − MS_sq)/(k·S·P)          (unbiased: E V̂ = Var(ȳ))
    ν = (MS_seed + MS_question − MS_sq)² / (MS_seed²/(S−1) + MS_question²/(P−1) + MS_sq²/((S−1)(P−1)))

(Satterthwaite 1946), which the crossed t-interval ȳ ± t_{ν}·√V̂ and the allocation's power
(``evidence.statistics.allocation``) use. V̂ is the mean squares' combination, not the truncated components'.

The intraclass correlation of question: ρ_question = σ²_question/σ²_total (σ²_total the four components' sum), the
correlation of two responses to the same question from different seeds. The design effect of the grand mean against
S·P·k independent responses of the same total variance:

    DEFF = Var(ȳ)·S·P·k/σ²_total = (P·k·σ²_seed + S·k·σ²_question + k·σ²_sq + σ²_response)/σ²_total

from the truncated components; with one seed (S = 1, σ²_seed = 0) it is Kish's 1 + (k − 1)·ρ_cell. N/DEFF is the
number of independent responses the evaluation is worth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The components' names, in the order the tables write them.
NAMES = ("seed", "question", "seed_x_question", "response")


@dataclass(frozen=True)
class Components:
    """The mean squares and the truncated ANOVA estimates of one balanced S x P x k design (module docstring)."""

    n_seeds: int
    n_questions: int
    k: int
    mean: float
    ms_seed: float
    ms_question: float
    ms_interaction: float
    ms_response: float
    seed: float
    question: float
    interaction: float
    response: float

    @property
    def total(self) -> float:
        return self.seed + self.question + self.interaction + self.response

    @property
    def variances(self) -> tuple[float, float, float, float]:
        return self.seed, self.question, self.interaction, self.response

    @property
    def icc_question(self) -> float | None:
        """σ²_question/σ²_total; None when the total is 0."""
        return self.question / self.total if self.total > 0 else None

    @property
    def design_effect(self) -> float | None:
        """(P·k·σ²_seed + S·k·σ²_question + k·σ²_sq + σ²_response)/σ²_total; None when the total is 0."""
        s, p, k = self.n_seeds, self.n_questions, self.k
        if self.total <= 0:
            return None
        return (p * k * self.seed + s * k * self.question + k * self.interaction + self.response) / self.total

    @property
    def var_mean(self) -> float:
        """V̂ = (MS_seed + MS_question − MS_sq)/(k·S·P): the unbiased estimate of the grand mean's variance (it may
        be negative in a small design; ``se_mean`` is then None)."""
        return (self.ms_seed + self.ms_question - self.ms_interaction) / (self.k * self.n_seeds * self.n_questions)

    @property
    def se_mean(self) -> float | None:
        return math.sqrt(self.var_mean) if self.var_mean > 0 else None

    @property
    def df(self) -> float | None:
        """Satterthwaite's ν of V̂; None when V̂ ≤ 0."""
        return satterthwaite_df(self.ms_seed, self.ms_question, self.ms_interaction, self.n_seeds, self.n_questions)


def satterthwaite_df(ms_seed: float, ms_question: float, ms_interaction: float, n_seeds: int,
                     n_questions: int) -> float | None:
    """ν = (MS_s + MS_q − MS_sq)²/(MS_s²/(S−1) + MS_q²/(P−1) + MS_sq²/((S−1)(P−1))); None when the numerator's
    combination is not positive."""
    combined = ms_seed + ms_question - ms_interaction
    s1, p1 = n_seeds - 1, n_questions - 1
    denominator = ms_seed ** 2 / s1 + ms_question ** 2 / p1 + ms_interaction ** 2 / (s1 * p1)
    return combined * combined / denominator if combined > 0 and denominator > 0 else None


def crossed_components(cell_means, ms_response: float, k: int) -> Components | None:
    """The ANOVA estimates from an S x P block of cell means (each the mean of k responses) and the within-cell mean
    square (module docstring); None unless S ≥ 2, P ≥ 2 and k ≥ 2 (with k = 1 the response and the interaction are
    confounded, with one seed or one question that factor's component has no degrees of freedom)."""
    import numpy as np

    y = np.asarray(cell_means, dtype=np.float64)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 2 or k < 2:
        return None
    n_seeds, n_questions = y.shape
    ms_response = float(ms_response)
    grand = float(y.mean())
    seed_means, question_means = y.mean(axis=1), y.mean(axis=0)
    ms_seed = k * n_questions * float(((seed_means - grand) ** 2).sum()) / (n_seeds - 1)
    ms_question = k * n_seeds * float(((question_means - grand) ** 2).sum()) / (n_questions - 1)
    residual = y - seed_means[:, None] - question_means[None, :] + grand
    ms_interaction = k * float((residual ** 2).sum()) / ((n_seeds - 1) * (n_questions - 1))
    return Components(
        n_seeds, n_questions, k, grand, ms_seed, ms_question, ms_interaction, ms_response,
        seed=max(0.0, (ms_seed - ms_interaction) / (k * n_questions)),
        question=max(0.0, (ms_question - ms_interaction) / (k * n_seeds)),
        interaction=max(0.0, (ms_interaction - ms_response) / k),
        response=max(0.0, ms_response))


def binary_within_ms(correct, k: int) -> float:
    """MS_response of 0/1 responses from an S x P block of correct counts c (k responses per cell):
    Σ_cells c·(k − c)/k / (S·P·(k − 1))."""
    import numpy as np

    c = np.asarray(correct, dtype=np.float64)
    return float((c * (k - c) / k).sum()) / (c.size * (k - 1))


def arm_components(correct, k: int) -> Components | None:
    """One arm's components of pass@1 from its S x P block of correct counts out of k (module docstring)."""
    import numpy as np

    c = np.asarray(correct, dtype=np.float64)
    if c.ndim != 2 or k < 2:
        return None
    return crossed_components(c / k, binary_within_ms(c, k), k)


def pair_components(correct_a, correct_b, k: int) -> Components | None:
    """A pair's components of the difference of pass@1, a − b, from the two arms' S x P blocks of correct counts out
    of k (the same seeds in the same rows, the same questions in the same columns): the d block's cell-level mean
    squares with the summed within-cell mean squares (module docstring)."""
    import numpy as np

    a, b = np.asarray(correct_a, dtype=np.float64), np.asarray(correct_b, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape or k < 2:
        return None
    return crossed_components((a - b) / k, binary_within_ms(a, k) + binary_within_ms(b, k), k)
