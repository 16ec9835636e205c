"""How long the path of one GRPO step is, in the project's own code: functions, lines, files, depth.

One real GRPO step on the CPU (the "tiny" random Llama, 8 experiences in 2 groups of 4, two
micro-batches, the preset's k2 KL loss against a reference model) runs under `sys.setprofile`.
Only the project's own files count (rft/, consumers/, producers/ under `--root`; not tests/ or
bench/). The path starts where the sampled batch of decoded experiences enters the step trainer
(`StepTrainer.train`) and ends when the engine calls the optimizer's `step`. A first step runs
unprofiled first, so lazy imports and one-time set-up stay out of the figures.

Printed: the functions called (distinct), the distinct source lines of those functions, the files
they live in, the deepest nesting of project frames (calls below the entry: the entry is depth 0), and every call from a
library module (rft/) to an app module (consumers/) (a call pointing up).

Run: python bench/grpo_path.py [--root CHECKOUT] [--list]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT_DIRS = ("rft", "consumers", "producers")
# comprehension and generator-expression frames are parts of the function that holds them (Python
# 3.12 inlines comprehensions): they are neither functions of their own nor a level of depth
INLINE = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})


@dataclass
class PathProfile:
    """What the profiler saw between the entry and the optimizer step."""

    root: str
    functions: dict[tuple[str, int, str], int] = field(default_factory=dict)  # -> max depth
    up_calls: set[tuple[str, str]] = field(default_factory=set)
    depth: int = 0
    done: bool = False

    def owns(self, filename: str) -> bool:
        rel = os.path.relpath(filename, self.root)
        return rel.split(os.sep, 1)[0] in PROJECT_DIRS

    def counts(self, code: types.CodeType) -> bool:
        return self.owns(code.co_filename) and code.co_name not in INLINE

    def rel(self, filename: str) -> str:
        return os.path.relpath(filename, self.root)

    def project_frames(self, frame: types.FrameType | None) -> list[types.FrameType]:
        out = []
        while frame is not None:
            if self.counts(frame.f_code):
                out.append(frame)
            frame = frame.f_back
        return out

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event != "call" or self.done:
            return
        code = frame.f_code
        caller = frame.f_back
        if (
            f"{os.sep}torch{os.sep}optim{os.sep}" in code.co_filename
            and code.co_name in ("step", "wrapper", "_use_grad")
            and caller is not None
            and self.owns(caller.f_code.co_filename)
        ):
            self.done = True  # the optimizer step: the end of the path
            return
        if not self.counts(code) or code.co_name == "<module>":
            return
        stack = self.project_frames(frame)
        depth = len(stack) - 1  # calls below the entry
        key = (self.rel(code.co_filename), code.co_firstlineno, code.co_qualname)
        self.functions[key] = max(self.functions.get(key, 0), depth)
        self.depth = max(self.depth, depth)
        if len(stack) > 1:
            parent = self.rel(stack[1].f_code.co_filename)
            child = self.rel(code.co_filename)
            if parent.startswith("rft" + os.sep) and child.startswith("consumers" + os.sep):
                self.up_calls.add(
                    (f"{parent}:{stack[1].f_code.co_qualname}", f"{child}:{code.co_qualname}")
                )

    def lines(self) -> int:
        """Distinct source lines spanned by the functions seen (a nested function's lines count
        once, inside its parent's)."""
        seen: set[tuple[str, int]] = set()
        for (rel, first, _), code in self._codes().items():
            last = max((line for _, _, line in code.co_lines() if line is not None), default=first)
            seen.update((rel, n) for n in range(first, last + 1))
        return len(seen)

    def _codes(self) -> dict[tuple[str, int, str], types.CodeType]:
        return {key: code for key, code in _CODES.items() if key in self.functions}


_CODES: dict[tuple[str, int, str], types.CodeType] = {}


def _remembering(profile: PathProfile) -> Any:
    def hook(frame: types.FrameType, event: str, arg: Any) -> None:
        profile(frame, event, arg)
        if event == "call" and not profile.done and profile.counts(frame.f_code):
            code = frame.f_code
            _CODES[(profile.rel(code.co_filename), code.co_firstlineno, code.co_qualname)] = code

    return hook


def grpo_batch(seed: int = 0) -> Any:
    """8 experiences in 2 groups of 4, as the sampler hands them to the step trainer."""
    import numpy as np

    from rft.buffer.sampler import BatchRow, SampledBatch, SamplerCounters
    from rft.events.models import Experience

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(8):
        group = f"g{i // 4}"
        response = rng.integers(3, 250, int(rng.integers(4, 9))).astype(np.int32)
        exp = Experience(
            experience_id=f"{group}/{i % 4}",
            task_id=group,
            group_id=group,
            group_size=4,
            explorer_id="e",
            model_version=0,
            prompt_ids=rng.integers(3, 250, int(rng.integers(3, 7))).astype(np.int32),
            response_ids=response,
            logprobs=(-rng.random(len(response)) * 3).astype(np.float32),
            reward=float(rng.integers(0, 2)),
        )
        rows.append(BatchRow(exp, None, 1, False))
    return SampledBatch(rows, 0, SamplerCounters())


def train_step_module(root: str) -> types.ModuleType:
    """The step trainer's module: rft.consumers.trainer.train_step, or consumers.train_step in a
    checkout from before the consumers folders (for a before/after table)."""
    if (Path(root) / "consumers" / "trainer" / "train_step.py").exists():
        return importlib.import_module("rft.consumers.trainer.train_step")
    return importlib.import_module("consumers.train_step")


def profile_step(root: str) -> PathProfile:
    import torch

    from rft.algorithms.objective import build_loss
    from rft.algorithms.presets import resolve_algorithm

    StepTrainer = train_step_module(root).StepTrainer
    from rft.engines.models import load_model
    from rft.engines.trainer import TorchTrainerConfig, TorchTrainerEngine

    torch.manual_seed(0)
    spec = resolve_algorithm({"algorithm_type": "grpo"})
    loss = build_loss(spec)
    model, tokenizer = load_model("tiny")
    config = TorchTrainerConfig(
        micro_batch_size=4, use_ref_model=spec.use_reference, ref_in_loss=loss.needs_reference
    )
    engine = TorchTrainerEngine(model, config, tokenizer=tokenizer)
    trainer = StepTrainer(spec, loss, engine, max_response_length=16)
    trainer.train(grpo_batch(0), 1)  # warm: imports and first-call set-up stay out
    profile = PathProfile(root)
    batch = grpo_batch(1)
    sys.setprofile(_remembering(profile))
    try:
        values = trainer.train(batch, 2)
    finally:
        sys.setprofile(None)
    if not profile.done:
        raise SystemExit("the step never reached optimizer.step: nothing measured")
    if not all(torch.isfinite(torch.tensor(v)) for v in (values["loss"], values["grad_norm"])):
        raise SystemExit(f"the step's loss or gradient is not finite: {values}")
    return profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--list", action="store_true", help="print every function seen")
    args = parser.parse_args()
    root = str(Path(args.root).resolve())
    sys.path.insert(0, root)
    module = train_step_module(root)
    if not str(module.__file__).startswith(root + os.sep):
        raise SystemExit(f"{module.__name__} came from {module.__file__}")
    profile = profile_step(root)
    files = sorted({rel for rel, _, _ in profile.functions})
    print(f"root: {root}")
    print(f"functions: {len(profile.functions)}")
    print(f"lines: {profile.lines()}")
    print(f"files: {len(files)}")
    for rel in files:
        print(f"  {rel}: {sum(1 for f, _, _ in profile.functions if f == rel)}")
    print(f"max depth: {profile.depth}")
    print(f"calls up (rft/ -> consumers/): {len(profile.up_calls)}")
    for parent, child in sorted(profile.up_calls):
        print(f"  {parent} -> {child}")
    if args.list:
        for rel in files:
            print(rel)
            for (frel, line, name), depth in sorted(profile.functions.items()):
                if frel == rel:
                    print(f"  {line:5d} {name} (depth {depth})")


if __name__ == "__main__":
    main()
