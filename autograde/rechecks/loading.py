"""Pieces shared by the probes of modules: random weights as inputs, and loading them on both sides.

The probe's code (run in the sandbox) builds the student's module and loads the same random weights that the
trusted grader loads into the course's reference module, so the two compute the same function."""
from __future__ import annotations

import torch
from torch import nn

# Runs in the sandbox, before a probe's code: `_load(module, "prefix")` loads inputs["prefix.<param>"].
LOAD = '''
import torch
from torch import nn
def _load(module, prefix):
    state = {key[len(prefix) + 1:]: value for key, value in inputs.items() if key.startswith(prefix + ".")}
    module = module.double()                # first: loading float64 weights into float32 would round them
    module.load_state_dict(state)
    return module.eval()
'''


def random_weights(module: nn.Module, prefix: str, g: torch.Generator, scale: float = 0.3) -> dict[str, torch.Tensor]:
    """{prefix.<param>: random float64 tensor} for every entry of the module's state dict."""
    return {f"{prefix}.{key}": torch.randn(value.shape, generator=g, dtype=torch.float64) * scale
            for key, value in module.state_dict().items()}


def load(module: nn.Module, inputs: dict[str, torch.Tensor], prefix: str) -> nn.Module:
    """The trusted side of LOAD."""
    module = module.double()
    module.load_state_dict({key[len(prefix) + 1:]: value for key, value in inputs.items()
                            if key.startswith(prefix + ".")})
    return module.eval()
