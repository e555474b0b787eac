"""Precisions: the names in the network YAML and their torch dtypes."""

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
