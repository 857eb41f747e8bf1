"""shard(): each data-parallel rank reads its own 1/dp of the dataset (DistributedSampler). Ranks of
one tensor- or pipeline-parallel group share a data-parallel rank, so they read the same batches."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader, Dataset, DistributedSampler

from shipyard.parallel.preparation import layout


def shard(dataset: Dataset, batch_size: int, *, shuffle: bool = True, seed: int = 0, drop_last: bool = False,
          **loader_options: Any) -> DataLoader:
    """A DataLoader of per-rank batches of `batch_size`; the global batch is batch_size x data-parallel
    size. Call `loader.sampler.set_epoch(epoch)` each epoch for a new shuffle order. Call it after
    prepare() when prepare() was given parameters, so both use the same arrangement."""
    arrangement = layout()
    sampler = DistributedSampler(dataset, num_replicas=arrangement.dp, rank=arrangement.dp_rank,
                                 shuffle=shuffle, seed=seed, drop_last=drop_last)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **loader_options)
