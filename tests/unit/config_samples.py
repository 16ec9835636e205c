"""The smallest valid run config, shared by the config tests."""

MINIMAL = """\
project: p
name: n
algorithm:
  repeat_times: 2
model:
  model_path: tiny
buffer:
  batch_size: 4
  explorer_input:
    default_workflow_type: math_workflow
    taskset:
      name: train
      storage_type: generator
      path: arithmetic
"""
