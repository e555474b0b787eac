"""The dataset service: BPE tokenizers, token shards with splits, batches over NATS.

Entry point: `python -m computeall.dataset --nats URL --data-dir DIR`.
"""
