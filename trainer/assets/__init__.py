"""Embedded default workload assets (the "toy" workload): dataset, tiny Qwen3 model, build script.

``python -m trainer.assets.build_toy --write-manifest`` rebuilds everything under
``trainer/assets/toy/`` and re-pins it in ``manifests/toy.json``.
"""
