"""The design vocabulary an experiment spec names and the statistics implement: the alpha-spending rules of a
sized design (``seeds: {n: auto, ..., spending: <rule>}``) and the power at which a design's smallest
detectable difference is stated."""

# The spending rules a spec may name; the first is the default.
OBRIEN_FLEMING, POCOCK = "obrien-fleming", "pocock"
SPENDING_RULES = (OBRIEN_FLEMING, POCOCK)
# The power at which the minimum detectable effect is stated (the convention of power analysis).
MDE_POWER = 0.8
# A design of seeds in waves has at most this many looks.
MAX_WAVES = 10


def fractions(waves: tuple[int, ...]) -> tuple[float, ...]:
    """The information fraction of each look: t_k = M_k/M_K (the planned seeds through wave k over all)."""
    total, out, seen = sum(waves), [], 0
    for size in waves:
        seen += size
        out.append(seen / total)
    return tuple(out)
