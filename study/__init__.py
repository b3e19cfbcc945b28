"""An experiment as pre-registered: its spec (``spec``: the one parser of every key, for the launcher's stages and
the evidence's verdict), the measures it names (``measure``: their grammar) and the design vocabulary it uses
(``design``: spending rules, the power a smallest detectable difference is stated at).

Below both the launcher and the evidence, above ``facts``: it imports neither, so the launcher reads a spec
without the evidence, and the evidence judges one without the launcher.
"""
