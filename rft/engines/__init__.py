"""Engines: model loading, rollout (sampling with logprobs) and training (optimizer steps).

Import from the submodules: `rft.engines.models`, `rft.engines.rollout`, `rft.engines.trainer`,
`rft.engines.logprobs`, `rft.engines.weights`. Nothing heavy is imported here.
"""
